import { appendFile, mkdir, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import type { BatchStatus } from '../../src/app/batch/status-shapes.js';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { BatchWatch } from '../../src/app/metrics/batch-watch.js';

/**
 * The exporter's read of one batch folder (issue 45) is incremental: the journal from where the last scan ended,
 * each result.json once (on its pair_finished record), status derived again only when its files changed; a journal
 * replaced by another file starts the batch again. Real files in a temporary folder; the status reader is a fake
 * that counts its calls.
 */
class CountingFs extends NodeFileSystem {
  readonly reads: string[] = [];
  override readFile(path: string): Promise<Uint8Array> {
    this.reads.push(path);
    return super.readFile(path);
  }
}

const T0 = Date.parse('2026-12-05T00:00:00Z');
const at = (sec: number): string => new Date(T0 + sec * 1000).toISOString();
let dir: string;
let seq = 0;

function record(type: string, fields: Record<string, unknown>): string {
  seq += 1;
  return `${JSON.stringify({ seq, type, at: at(seq), ...fields })}\n`;
}

async function finish(
  job: string,
  classification: string,
  opts: { verified?: boolean; phases?: boolean } = {},
) {
  await mkdir(join(dir, 'jobs', job), { recursive: true });
  const result = {
    schema: 'roboguide.e1.result/v1',
    job_id: job,
    batch_id: 'b',
    claim_id: `c-${job}`,
    classification,
    reasons: classification === 'completed' ? [] : ['timeout'],
    outcome: null,
    outcome_redactions: 2,
    outcome_sha256: null,
    container: { id: 'x', exit_code: 0, timed_out: false, oom_killed: false },
    logs: { stdout: { bytes: 100, closed: true }, stderr: { bytes: 7, closed: true } },
    sessions: { files: 0, bytes: 0, refusals: [] },
    provider_failure: null,
    provider_failure_error_kind: null,
    cleanup: { removed: true, verified_absent: opts.verified ?? true, attempts: 1 },
    engine_error: null,
    ...(opts.phases === false
      ? {}
      : { phases: { create_ms: 100, run_ms: 5000, drain_ms: 10, collect_ms: 200, remove_ms: 300 } }),
    started_at: at(0),
    finished_at: at(60),
  };
  await writeFile(join(dir, 'jobs', job, 'result.json'), JSON.stringify(result));
  await appendFile(
    join(dir, 'events.jsonl'),
    record('pair_finished', {
      job_id: job,
      claim_id: `c-${job}`,
      classification,
      reasons: result.reasons,
      started_at: at(0),
      finished_at: at(60),
      gpu_peak_mib: null,
    }),
  );
}

function watcher(fs: CountingFs, statusCalls: { n: number }): BatchWatch {
  const status = { batch_id: 'b', state: 'running', pause_reasons: [], counts: {}, workers_allowed: 1 };
  return new BatchWatch(
    {
      fs,
      host: { isAlive: () => false },
      readStatus: () => {
        statusCalls.n += 1;
        return Promise.resolve(status as unknown as BatchStatus);
      },
    },
    new EvidenceStore(fs, dir),
  );
}

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-batch-watch-'));
  seq = 0;
  await writeFile(join(dir, 'events.jsonl'), record('batch_created', { batch_id: 'b', jobs: 5 }));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('BatchWatch (the exporter, one batch)', () => {
  it('reads only what changed: the journal from its last offset, each result.json once', async () => {
    await finish('j1', 'completed');
    await finish('j2', 'infrastructure_failure', { verified: false });
    await finish('j3', 'completed', { phases: false });
    const fs = new CountingFs();
    const calls = { n: 0 };
    const watch = watcher(fs, calls);
    const first = await watch.scan(new Date(T0 + 100_000));
    expect(first.finished.map((p) => p.classification)).toEqual([
      'completed',
      'infrastructure_failure',
      'completed',
    ]);
    expect(first.finished[0]).toMatchObject({
      durationSec: 60,
      phasesSec: { create: 0.1, run: 5, drain: 0.01, collect: 0.2, remove: 0.3 },
      logBytes: { stdout: 100, stderr: 7 },
      outcomeRedactions: 2,
    });
    expect(first.finished[2]!.phasesSec).toBeNull();
    expect(first.containersUnverified).toBe(1);
    expect(first.reset).toBe(false);
    expect(calls.n).toBe(1);

    const readsBefore = fs.reads.length;
    const again = await watch.scan(new Date(T0 + 101_000));
    expect(again.finished).toEqual([]);
    expect(calls.n).toBe(1); // nothing changed: the status is not derived again
    expect(fs.reads.slice(readsBefore).filter((p) => p.endsWith('result.json'))).toEqual([]);

    await finish('j4', 'completed');
    await appendFile(
      join(dir, 'events.jsonl'),
      record('cleanup_retried', { job_id: 'j2', containers: 1, verified_absent: true }),
    );
    const mark = fs.reads.length;
    const third = await watch.scan(new Date(T0 + 102_000));
    expect(third.finished.map((p) => p.classification)).toEqual(['completed']);
    expect(fs.reads.slice(mark).filter((p) => p.endsWith('result.json'))).toEqual([
      join(dir, 'jobs', 'j4', 'result.json'),
    ]);
    expect(third.containersUnverified).toBe(0);
    expect(calls.n).toBe(2); // the journal changed
  });

  it('a journal replaced by another, shorter one starts the batch again (reset): its pairs are folded anew', async () => {
    await finish('j1', 'completed');
    await finish('j2', 'completed');
    const watch = watcher(new CountingFs(), { n: 0 });
    expect((await watch.scan(new Date(T0))).finished).toHaveLength(2);
    seq = 0;
    await writeFile(join(dir, 'events.new'), record('batch_created', { batch_id: 'b', jobs: 5 }));
    await rename(join(dir, 'events.new'), join(dir, 'events.jsonl'));
    await finish('j1', 'infrastructure_failure');
    const next = await watch.scan(new Date(T0 + 1000));
    expect(next.reset).toBe(true);
    expect(next.finished.map((p) => p.classification)).toEqual(['infrastructure_failure']);
  });

  it('derives the status again after refreshMs even when nothing changed (its ETA counts from now)', async () => {
    const calls = { n: 0 };
    const watch = watcher(new CountingFs(), calls);
    await watch.scan(new Date(T0));
    await watch.scan(new Date(T0 + 29_000));
    expect(calls.n).toBe(1);
    await watch.scan(new Date(T0 + 31_000));
    expect(calls.n).toBe(2);
  });
});
