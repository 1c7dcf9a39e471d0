import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import { supervise } from '../../src/app/batch/supervisor.js';
import { systemClock } from '../../src/adapters/system-clock.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import { createExecutePairDeps } from '../../src/composition-root.js';
import { foldJournal } from '../../src/core/batch-state.js';
import { containersLabelled, DRIVER_IMAGE, noDocker, runtime, sweep } from '../support/docker.js';
import { FaultyFileSystem, type FaultRule } from '../support/faulty-file-system.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';

/**
 * SPEC §4–§5 file-system fault matrix: each write site of the batch × {error before the operation, operation
 * done but error reported, ENOSPC}. The fault hits the FIRST pair (f1) of a 3-pair batch of quick completed
 * pairs. Every cell: fail closed (paused/harness, or completed where the storage-fault rule recovers), no pair
 * run twice, nothing already written lost, no container left, reservations held exactly where no verified
 * result was reconciled.
 */

const JOBS = ['f1', 'f2', 'f3'] as const;
// 10,000 lines of 64 bytes: over twice the log sink's 256 KiB block, so stdout.log takes at least two write(2)s
// however the engine's chunks arrive (the cells fail its second one; 2,000 lines could arrive as one block under load)
const LINES = 10_000;
const LINE_BYTES = 64;
const EXPECTED_STDOUT = Array.from(
  { length: LINES },
  (_, i) => `line ${i + 1}`.padEnd(LINE_BYTES - 1) + '\n',
).join('');
const TEMP_NAME = /\/\.[^/]+\.tmp-\d+-[0-9a-f]{16}$/;
const FOREVER = 1_000;

type Outcome = 'paused' | 'drained';

interface Cell {
  readonly site: string;
  readonly kind: string;
  readonly rules: readonly FaultRule[];
  /** The correct fail-closed outcome of supervise(). */
  readonly expect: Outcome;
  /** Driver runs (driver-runs.log), in order. */
  readonly runs: readonly string[];
  /** f1's result.json classification (null: no result.json). */
  readonly f1: string | null;
  /** Jobs whose reservation must still be held afterwards. */
  readonly held: readonly string[];
  /** A reason f1's result.json must carry. */
  readonly reason?: string;
  /** The faulted journal record must not be in the journal (written and cut, or never written). */
  readonly lost?: string;
  /** The disk stays full for the journal: the pause itself cannot be journalled. */
  readonly journalFull?: true;
}

const f1 = (file: string): RegExp => new RegExp(`/jobs/f1/${file.replace('.', '\\.')}$`);
const f1Temp = (file: string): RegExp => new RegExp(`/jobs/f1/\\.${file.replace('.', '\\.')}\\.tmp-`);
const ALL: readonly string[] = JOBS;
const ENOSPC = { when: 'before', code: 'ENOSPC', times: FOREVER } as const;

const CELLS: readonly Cell[] = [
  // receipt publish: link(2) of the fsynced temp receipt (the claim)
  {
    site: 'receipt publish (link)',
    kind: 'before',
    rules: [{ op: 'link', path: f1('receipt.json'), when: 'before' }],
    expect: 'paused',
    runs: [],
    f1: null,
    // No claim and no container: the slot is given back at once (issue 44; it used to wait for resume).
    held: [],
  },
  {
    site: 'receipt publish (link)',
    kind: 'after',
    rules: [{ op: 'link', path: f1('receipt.json'), when: 'after' }],
    expect: 'paused',
    runs: [],
    f1: null,
    // The link happened, the error came after: the claim stands and keeps its slot for resume.
    held: ['f1'],
  },
  {
    site: 'receipt publish (link)',
    kind: 'ENOSPC',
    rules: [{ op: 'write', path: f1Temp('receipt.json'), ...ENOSPC }],
    expect: 'paused',
    runs: [],
    f1: null,
    held: [],
  },
  // receipt update with the container id: atomic replace (the container is created, never started)
  {
    site: 'receipt update (rename)',
    kind: 'before',
    rules: [{ op: 'rename', path: f1('receipt.json'), when: 'before' }],
    expect: 'paused',
    runs: [],
    f1: 'harness_failure',
    held: [],
    reason: 'receipt_write_failed',
  },
  {
    site: 'receipt update (rename)',
    kind: 'after',
    rules: [{ op: 'rename', path: f1('receipt.json'), when: 'after' }],
    expect: 'paused',
    runs: [],
    f1: 'harness_failure',
    held: [],
    reason: 'receipt_write_failed',
  },
  {
    site: 'receipt update (rename)',
    kind: 'ENOSPC',
    rules: [{ op: 'write', path: f1Temp('receipt.json'), nth: 2, ...ENOSPC }],
    expect: 'paused',
    runs: [],
    f1: 'harness_failure',
    held: [],
    reason: 'receipt_write_failed',
  },
  // stdout.log: the second write(2) of the stream fails; the first stays on disk
  {
    site: 'stdout.log (write)',
    kind: 'before',
    rules: [{ op: 'write', path: f1('stdout.log'), nth: 2, when: 'before' }],
    expect: 'paused',
    runs: ['f1'],
    f1: 'harness_failure',
    held: [],
    reason: 'log_write_failed',
  },
  {
    site: 'stdout.log (write)',
    kind: 'after',
    rules: [{ op: 'write', path: f1('stdout.log'), nth: 2, when: 'after' }],
    expect: 'paused',
    runs: ['f1'],
    f1: 'harness_failure',
    held: [],
    reason: 'log_write_failed',
  },
  {
    site: 'stdout.log (write)',
    kind: 'ENOSPC',
    rules: [{ op: 'write', path: f1('stdout.log'), nth: 2, when: 'partial', partialBytes: 100 }],
    expect: 'paused',
    runs: ['f1'],
    f1: 'harness_failure',
    held: [],
    reason: 'log_write_failed',
  },
  // result.json: a one-shot error is recovered by read-back/retry (§8 storage-fault rule); a full disk is not
  {
    site: 'result.json (rename)',
    kind: 'before',
    rules: [{ op: 'rename', path: f1('result.json'), when: 'before' }],
    expect: 'drained',
    runs: ALL,
    f1: 'completed',
    held: [],
  },
  {
    site: 'result.json (rename)',
    kind: 'after',
    rules: [{ op: 'rename', path: f1('result.json'), when: 'after' }],
    expect: 'drained',
    runs: ALL,
    f1: 'completed',
    held: [],
  },
  {
    site: 'result.json (rename)',
    kind: 'ENOSPC',
    rules: [{ op: 'write', path: f1Temp('result.json'), ...ENOSPC }],
    expect: 'paused',
    runs: ['f1'],
    f1: null,
    held: ['f1'],
  },
  // terminal-proof.json: same rule; a proof that cannot be written keeps the reservation
  {
    site: 'terminal-proof.json (rename)',
    kind: 'before',
    rules: [{ op: 'rename', path: f1('terminal-proof.json'), when: 'before' }],
    expect: 'drained',
    runs: ALL,
    f1: 'completed',
    held: [],
  },
  {
    site: 'terminal-proof.json (rename)',
    kind: 'after',
    rules: [{ op: 'rename', path: f1('terminal-proof.json'), when: 'after' }],
    expect: 'drained',
    runs: ALL,
    f1: 'completed',
    held: [],
  },
  {
    site: 'terminal-proof.json (rename)',
    kind: 'ENOSPC',
    rules: [{ op: 'write', path: f1Temp('terminal-proof.json'), ...ENOSPC }],
    expect: 'paused',
    runs: ['f1'],
    f1: 'completed',
    held: ['f1'],
  },
  // journal: the 3rd append of the supervisor is f1's `claimed` record (after supervisor_started, source_check)
  {
    site: 'journal append (claimed f1)',
    kind: 'before',
    rules: [{ op: 'write', path: /\/events\.jsonl$/, nth: 3, when: 'before' }],
    expect: 'paused',
    runs: [],
    f1: null,
    held: ['f1'],
    lost: 'claimed',
  },
  {
    site: 'journal append (claimed f1)',
    kind: 'after',
    rules: [{ op: 'write', path: /\/events\.jsonl$/, nth: 3, when: 'after' }],
    expect: 'paused',
    runs: [],
    f1: null,
    held: ['f1'],
    lost: 'claimed',
  },
  {
    site: 'journal append (claimed f1)',
    kind: 'ENOSPC partial',
    rules: [{ op: 'write', path: /\/events\.jsonl$/, nth: 3, when: 'partial', partialBytes: 10 }],
    expect: 'paused',
    runs: [],
    f1: null,
    held: ['f1'],
    lost: 'claimed',
  },
  {
    site: 'journal append (claimed f1)',
    kind: 'ENOSPC full',
    rules: [{ op: 'write', path: /\/events\.jsonl$/, nth: 3, ...ENOSPC }],
    expect: 'paused',
    runs: [],
    f1: null,
    held: ['f1'],
    lost: 'claimed',
    journalFull: true,
  },
  // status.json is derived (§4): a failed write must neither crash nor stop the batch. 2nd write = while f1 runs.
  {
    site: 'status.json (rename)',
    kind: 'before',
    rules: [{ op: 'rename', path: /\/status\.json$/, nth: 2, when: 'before' }],
    expect: 'drained',
    runs: ALL,
    f1: 'completed',
    held: [],
  },
  {
    site: 'status.json (rename)',
    kind: 'after',
    rules: [{ op: 'rename', path: /\/status\.json$/, nth: 2, when: 'after' }],
    expect: 'drained',
    runs: ALL,
    f1: 'completed',
    held: [],
  },
  {
    site: 'status.json (rename)',
    kind: 'ENOSPC',
    rules: [{ op: 'write', path: /\/\.status\.json\.tmp-/, nth: 2, ...ENOSPC }],
    expect: 'drained',
    runs: ALL,
    f1: 'completed',
    held: [],
  },
  {
    site: 'status.json (rename)',
    kind: 'before, 1st write',
    rules: [{ op: 'rename', path: /\/status\.json$/, nth: 1, when: 'before' }],
    expect: 'drained',
    runs: ALL,
    f1: 'completed',
    held: [],
  },
];

const rt = runtime();
let work: string;
let registryPath: string;
const matrix: Record<string, string>[] = [];

async function prepare(name: string): Promise<{ output: string; cwd: string; batchId: string }> {
  const cwd = join(work, name, 'cwd');
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    image: DRIVER_IMAGE,
    jobs: JOBS.map((id) => ({
      job_id: id,
      argv: ['/opt/driver/run', 'count', `numbered=${LINES}`, 'outcome=completed'],
      cwd,
      outcome_path: join(work, name, 'out', `${id}.json`),
      timeout_seconds: 60,
    })),
    stop_budget_seconds: 2,
  };
  const path = join(work, `${name}.json`);
  await writeFile(path, JSON.stringify(manifest));
  const output = join(work, name, 'batch');
  const record = await prepareBatch(
    { fs: new NodeFileSystem(), host: procHostIdentity, runtime: rt, clock: systemClock },
    {
      manifestPath: path,
      output,
      registryPath,
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 'test',
    },
  );
  return { output, cwd, batchId: record.batch_id };
}

async function superviseWithFaults(
  store: EvidenceStore,
): Promise<{ state: string } | { threw: string; stack: string }> {
  const registry = SqliteCapacityRegistry.open({ path: registryPath });
  try {
    const state = await supervise(
      {
        store,
        registry,
        execute: createExecutePairDeps(rt, silentLogger),
        logger: silentLogger,
        environment: {},
        handleSignals: false,
      },
      'start',
    );
    return { state };
  } catch (err) {
    return {
      threw: err instanceof Error ? err.message : String(err),
      stack: err instanceof Error ? (err.stack ?? '') : '',
    };
  } finally {
    registry.closeSync();
  }
}

async function readText(path: string): Promise<string | null> {
  return readFile(path, 'utf8').catch(() => null);
}

async function driverRuns(cwd: string): Promise<string[]> {
  return ((await readText(join(cwd, 'driver-runs.log'))) ?? '')
    .split('\n')
    .filter(Boolean)
    .map((l) => l.split(' ')[0] ?? '');
}

interface JobEvidence {
  readonly jobId: string;
  readonly claimId: string;
  readonly classification: string | null;
  readonly reasons: readonly string[];
  readonly proof: boolean;
}

/** Every job folder: receipt parses, result (if any) parses, stdout.log is an intact prefix of what was printed. */
async function checkEvidence(output: string, faultedLogAfter: boolean): Promise<JobEvidence[]> {
  const jobs: JobEvidence[] = [];
  const names = await readdir(join(output, 'jobs')).catch(() => [] as string[]);
  for (const jobId of names) {
    const dir = join(output, 'jobs', jobId);
    const receiptText = await readText(join(dir, 'receipt.json'));
    if (receiptText === null) continue;
    const receipt = JSON.parse(receiptText) as { job_id: string; claim_id: string };
    expect(receipt.job_id).toBe(jobId);
    const resultText = await readText(join(dir, 'result.json'));
    const result =
      resultText === null
        ? null
        : (JSON.parse(resultText) as {
            classification: string;
            reasons: string[];
            logs: { stdout: { bytes: number } };
          });
    const log = await readText(join(dir, 'stdout.log'));
    if (log !== null) expect(EXPECTED_STDOUT.startsWith(log)).toBe(true);
    if (result !== null && log !== null) {
      const onDisk = (await stat(join(dir, 'stdout.log'))).size;
      // The log keeps every byte it reported; a write done-but-reported-failed may leave more on disk, never less.
      if (faultedLogAfter && jobId === 'f1') expect(onDisk).toBeGreaterThanOrEqual(result.logs.stdout.bytes);
      else expect(onDisk).toBe(result.logs.stdout.bytes);
      if (result.classification === 'completed') expect(onDisk).toBe(EXPECTED_STDOUT.length);
    }
    const proof = (await readText(join(dir, 'terminal-proof.json'))) !== null;
    jobs.push({
      jobId,
      claimId: receipt.claim_id,
      classification: result?.classification ?? null,
      reasons: result?.reasons ?? [],
      proof,
    });
  }
  return jobs;
}

/** Held reservations of the batch (by job), then released so later cells can be admitted. */
async function heldJobs(
  batchId: string,
  jobs: readonly JobEvidence[],
): Promise<{ held: string[]; f1: string }> {
  const registry = SqliteCapacityRegistry.open({ path: registryPath });
  try {
    const held = await registry.held({ batchId });
    for (const j of jobs) {
      const state = (await registry.reservationForClaim(j.claimId))?.state ?? 'none';
      // A pair whose reconciliation wrote the proof is released; every other claimed pair keeps its reservation.
      expect(`${j.jobId}:${state}`).toBe(`${j.jobId}:${j.proof ? 'released' : 'held'}`);
    }
    const f1State = held.some((r) => r.jobId === 'f1')
      ? 'held'
      : jobs.some((j) => j.jobId === 'f1')
        ? 'released'
        : 'none';
    for (const r of held) await registry.release(r.id, r.claimId);
    return { held: held.map((r) => r.jobId).sort(), f1: f1State };
  } finally {
    registry.closeSync();
  }
}

describe.skipIf(noDocker)('batch file-system fault matrix (SPEC §4–§5)', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-fsfault-'));
    registryPath = join(work, 'registry.db');
  });
  afterAll(async () => {
    const header = '| write site | fault | outcome | f1 class | runs | f1 reservation | verdict |';
    const rows = matrix.map(
      (r) =>
        `| ${r['site']} | ${r['kind']} | ${r['outcome']} | ${r['f1']} | ${r['runs']} | ${r['reservation']} | ${r['verdict']} |`,
    );
    console.log(['', header, '|---|---|---|---|---|---|---|', ...rows].join('\n'));
    await rm(work, { recursive: true, force: true });
  });

  it.each(CELLS.map((c, i) => [`${c.site} × ${c.kind} → ${c.expect}`, c, i] as const))(
    '%s',
    async (_title, cell, index) => {
      const { output, cwd, batchId } = await prepare(`cell-${index}`);
      const fs = new FaultyFileSystem(new NodeFileSystem(), { rules: cell.rules });
      const outcome = await superviseWithFaults(new EvidenceStore(fs, output));
      const row: Record<string, string> = {
        site: cell.site,
        kind: cell.kind,
        outcome: 'state' in outcome ? outcome.state : `THREW: ${outcome.threw}`,
      };
      row['verdict'] = 'state' in outcome && outcome.state === cell.expect ? 'ok' : 'BUG';
      matrix.push(row);
      try {
        // fail-closed outcome first (soft: a crashing cell still reports every invariant below, with its stack)
        expect.soft(outcome, 'stack' in outcome ? outcome.stack : '').toEqual({ state: cell.expect });
        for (const r of cell.rules)
          expect(fs.count(r.op, r.path), 'the fault fired').toBeGreaterThanOrEqual(r.nth ?? 1);
        // (1) never a pair run twice, and exactly the runs fail-closed allows
        const runs = await driverRuns(cwd);
        row['runs'] = runs.join(',') || '-';
        expect(new Set(runs).size).toBe(runs.length);
        // (2) nothing already written is lost: only our own temp files are unlinked, only the journal's failed tail cut
        for (const c of fs.calls.filter((c) => c.op === 'unlink')) expect(c.paths[0]).toMatch(TEMP_NAME);
        for (const c of fs.calls.filter((c) => c.op === 'truncate'))
          expect(c.paths[0]).toMatch(/\/events\.jsonl$/);
        const jobs = await checkEvidence(output, cell.site.startsWith('stdout') && cell.kind === 'after');
        const journal = await new EvidenceStore(new NodeFileSystem(), output).readJournal();
        const first = jobs.find((j) => j.jobId === 'f1');
        row['f1'] = first?.classification ?? '-';
        // (3) no container of the batch remains
        expect(await containersLabelled({ 'roboguide.batch': batchId })).toEqual([]);
        // (4) reservations: held exactly where no verified result was reconciled
        const reservations = await heldJobs(batchId, jobs);
        row['reservation'] = reservations.f1;
        expect(reservations.held).toEqual(cell.held);
        expect(runs).toEqual(cell.runs);
        expect(row['f1']).toBe(cell.f1 ?? '-');
        if (cell.reason !== undefined) expect(first?.reasons).toContain(cell.reason);
        if (cell.lost !== undefined)
          expect(journal.filter((r) => r.type === cell.lost && 'job_id' in r && r.job_id === 'f1')).toEqual(
            [],
          );
        if (cell.expect === 'paused' && !cell.journalFull)
          expect(foldJournal(journal).pauseReasons).toEqual(['harness']);
      } finally {
        await sweep({ 'roboguide.batch': batchId });
        await releaseAll(batchId); // a failing cell must not leave the shared registry full for the next ones
      }
    },
  );
});

async function releaseAll(batchId: string): Promise<void> {
  const registry = SqliteCapacityRegistry.open({ path: registryPath });
  try {
    for (const r of await registry.held({ batchId })) await registry.release(r.id, r.claimId);
  } finally {
    registry.closeSync();
  }
}
