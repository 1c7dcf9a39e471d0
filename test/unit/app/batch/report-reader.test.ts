import { mkdtemp, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../../../src/adapters/fs/node-file-system.js';
import { currentProcessIdentity, procHostIdentity } from '../../../../src/adapters/host-identity.js';
import { ReportReader, readReportModel } from '../../../../src/app/batch/report.js';
import { EvidenceStore } from '../../../../src/app/evidence/evidence-store.js';
import type { Receipt } from '../../../../src/core/receipt.js';
import {
  claimJob,
  finishJob,
  recordSupervisor,
  startTestBatch,
  type TestBatch,
} from '../../../support/batch-dir.js';

/**
 * The supervisor's report.html is built by a ReportReader, which keeps what it read and, between whole reads, reads
 * only the journal's new records and the jobs they name (issue 39: a refresh read every job's files). Whatever it
 * keeps, its model must be the one `e1-batch report` builds from the files (readReportModel).
 */

let dir: string;
let batch: TestBatch;
const host = procHostIdentity;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-report-reader-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A store whose file system counts the files read under jobs/ (receipts, results) and the folders listed there. */
function countingStore(output: string): {
  store: EvidenceStore;
  jobReads: () => number;
  wholeJournalReads: () => number;
} {
  const fs = new NodeFileSystem();
  let reads = 0;
  let journal = 0;
  const counted = new Proxy(fs, {
    get(target, name, receiver) {
      const value: unknown = Reflect.get(target, name, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        if (
          (name === 'readFile' || name === 'open' || name === 'readdir') &&
          typeof args[0] === 'string' &&
          args[0].includes('/jobs/')
        )
          reads++;
        if (name === 'readFile' && typeof args[0] === 'string' && args[0].endsWith('/events.jsonl'))
          journal++;
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return {
    store: new EvidenceStore(counted, output),
    jobReads: () => reads,
    wholeJournalReads: () => journal,
  };
}

/** A seeded generator (mulberry32): the same steps for the same seed. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Step = { readonly record: boolean; readonly run: () => Promise<void> };

/** A pair's writes in the supervisor's order, each write to its folder followed by the record naming it. */
function lifecycle(b: TestBatch, jobId: string, classification: 'completed' | 'fatal'): Step[] {
  const at = '2026-12-02T10:00:05.000Z';
  let receipt: Receipt | undefined;
  const write = (run: () => Promise<unknown>): Step => ({
    record: false,
    run: async () => void (await run()),
  });
  const record = (run: () => Promise<unknown>): Step => ({
    record: true,
    run: async () => void (await run()),
  });
  return [
    write(async () => (receipt = await claimJob(b, jobId))),
    record(() =>
      b.store.appendJournal({
        type: 'claimed',
        at,
        job_id: jobId,
        claim_id: receipt!.claim_id,
        reservation_id: 'r',
        claimed_at: receipt!.claimed_at,
        deadline: '2026-12-02T10:02:01.000Z',
      }),
    ),
    write(() => writeFile(join(b.output, 'jobs', jobId, 'stdout.log'), '')),
    record(() =>
      b.store.appendJournal({ type: 'container_created', at, job_id: jobId, container_id: `c-${jobId}` }),
    ),
    write(() => writeFile(join(b.output, 'jobs', jobId, 'stderr.log'), 'x\n')),
    write(() => finishJob(b, receipt!, { classification })),
    record(() =>
      b.store.appendJournal({
        type: 'pair_finished',
        at,
        job_id: jobId,
        claim_id: receipt!.claim_id,
        classification,
        reasons: [],
        started_at: '2026-12-02T10:00:02.000Z',
        finished_at: '2026-12-02T10:01:02.000Z',
        gpu_peak_mib: null,
      }),
    ),
    write(() => writeFile(join(b.output, 'jobs', jobId, 'terminal-proof.json'), '{}')),
    record(() =>
      b.store.appendJournal({ type: 'reconciled', at, job_id: jobId, kind: 'committed', reason: null }),
    ),
  ];
}

describe('ReportReader', () => {
  it.each([1, 2, 3, 4, 5])(
    'pairs interleaved two at a time, read after every step (seed %i): the model is the whole read’s at every record',
    async (seed) => {
      const ids = Array.from({ length: 16 }, (_, i) => `j${String(i).padStart(2, '0')}`);
      batch = await startTestBatch(dir, { jobs: ids });
      const rand = random(seed);
      const reader = new ReportReader(batch.store, host, () => 0);
      const now = new Date('2026-12-02T10:00:30Z');
      const queue = ids.map((id, i) => lifecycle(batch, id, i % 3 === 0 ? 'fatal' : 'completed'));
      const active: Step[][] = [];
      let steps = 0;
      while (queue.length > 0 || active.length > 0) {
        while (active.length < 2 && queue.length > 0) active.push(queue.shift()!);
        const k = Math.floor(rand() * active.length);
        const step = active[k]!.shift()!;
        if (active[k]!.length === 0) active.splice(k, 1);
        await step.run();
        steps++;
        // Read between a write and its record too: what the reader keeps then must not lead it astray later.
        const model = await reader.read(now);
        if (step.record && active.every((steps) => steps[0]?.record !== true)) {
          expect(model).toEqual(await readReportModel(batch.store, now, host));
        }
      }
      expect(steps).toBe(ids.length * 9);
      const last = await reader.read(now);
      expect(last).toEqual(await readReportModel(batch.store, now, host));
      expect(last.pairs.filter((p) => p.classification === 'fatal')).toHaveLength(6);
      expect(last.pairs.every((p) => p.links.stdout !== undefined && p.links.stderr !== undefined)).toBe(
        true,
      );
    },
  );

  it('between whole reads, a refresh reads only the jobs the new records name and the claimed ones still running', async () => {
    const ids = Array.from({ length: 200 }, (_, i) => `j${String(i).padStart(3, '0')}`);
    batch = await startTestBatch(dir, { jobs: ids });
    for (const id of ids.slice(0, 150)) await finishJob(batch, await claimJob(batch, id));
    // This process is the batch's live supervisor, as the refresher's is: its liveness comes from the journal read.
    const me = await currentProcessIdentity();
    await recordSupervisor(batch, me);
    await batch.store.appendJournal({
      type: 'supervisor_started',
      at: '2026-12-02T10:00:00.000Z',
      mode: 'start',
      pid: me.pid,
      start_ticks: me.start_ticks,
      boot_id: me.boot_id,
    });
    const { store, jobReads, wholeJournalReads } = countingStore(batch.output);
    const reader = new ReportReader(store, host, () => 0);
    const now = new Date('2026-12-02T10:00:30Z');
    await reader.read(now);
    const whole = jobReads();
    expect(whole).toBeGreaterThanOrEqual(200 + 150 + 150); // every receipt, the results and listings of the claimed
    // One pair starts: its receipt and record.
    const receipt = await claimJob(batch, 'j150');
    await batch.store.appendJournal({
      type: 'claimed',
      at: now.toISOString(),
      job_id: 'j150',
      claim_id: receipt.claim_id,
      reservation_id: 'r',
      claimed_at: receipt.claimed_at,
      deadline: '2026-12-02T10:02:01.000Z',
    });
    const journalBefore = wholeJournalReads();
    const model = await reader.read(now);
    expect(jobReads() - whole).toBeLessThanOrEqual(4);
    expect(wholeJournalReads() - journalBefore).toBe(0); // its new records only, the supervisor's liveness too
    expect(model.pairs.find((p) => p.job_id === 'j150')?.status).toBe('running');
    expect(model).toEqual(await readReportModel(batch.store, now, host));
    // Nothing new: only the running pair's folder is read again.
    const before = jobReads();
    await reader.read(now);
    expect(jobReads() - before).toBeLessThanOrEqual(4);
  });

  it('a result written by another hand, with no record, shows by the next whole read; the last read is always whole', async () => {
    batch = await startTestBatch(dir, { jobs: ['a', 'b'] });
    let monotonicMs = 0;
    const reader = new ReportReader(batch.store, host, () => monotonicMs, 60_000);
    const t0 = new Date('2026-12-02T10:00:00Z');
    await reader.read(t0);
    await finishJob(batch, await claimJob(batch, 'a'), { classification: 'harness_failure' });
    monotonicMs = 1_000;
    const soon = new Date(t0.getTime() + 1_000);
    expect((await reader.read(soon)).pairs[0]?.status).toBe('pending');
    expect(await reader.read(soon, true)).toEqual(await readReportModel(batch.store, soon, host));
    await finishJob(batch, await claimJob(batch, 'b'));
    // The wall clock stepped back an hour meanwhile: the whole read is due by the monotonic clock all the same.
    monotonicMs = 62_000;
    const later = new Date(t0.getTime() - 3_600_000);
    const model = await reader.read(later);
    expect(model.pairs.map((p) => p.classification)).toEqual(['harness_failure', 'completed']);
    expect(model).toEqual(await readReportModel(batch.store, later, host));
  });

  it('a journal shorter than what was read (replaced by another hand) is read whole again', async () => {
    batch = await startTestBatch(dir, { jobs: ['a', 'b'] });
    const reader = new ReportReader(batch.store, host, () => 0);
    const now = new Date('2026-12-02T10:00:30Z');
    const receipt = await claimJob(batch, 'a');
    await batch.store.appendJournal({
      type: 'claimed',
      at: now.toISOString(),
      job_id: 'a',
      claim_id: receipt.claim_id,
      reservation_id: 'r',
      claimed_at: receipt.claimed_at,
      deadline: '2026-12-02T10:02:01.000Z',
    });
    await reader.read(now);
    await truncate(join(batch.output, 'events.jsonl'), 0);
    const model = await reader.read(now);
    expect(model).toEqual(await readReportModel(batch.store, now, host));
  });
});
