/**
 * The evidence of a finished pair, built by hand the way the supervisor leaves it (SPEC §4-§5):
 * admit → receipt (claim) → container attached → logs → outcome file → result.json. Used by the
 * reconciliation tests; no Docker.
 */
import { createHash, randomUUID } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import type { CapacityRegistry } from '../../src/app/ports/capacity-registry.js';
import type { ContainerRuntime, ContainerState } from '../../src/app/ports/container-runtime.js';
import type { FileSystem } from '../../src/app/ports/file-system.js';
import { RECEIPT_SCHEMA, type Receipt } from '../../src/core/receipt.js';
import type { Clock } from '../../src/app/ports/clock.js';
import { clockAt } from './fake-time.js';
import { RESULT_SCHEMA, type ResultRecord } from '../../src/core/result.js';

export interface FinishedPairOptions {
  readonly root: string;
  readonly outcomeDir: string;
  readonly registry: CapacityRegistry;
  readonly fs?: FileSystem;
  readonly batchId?: string;
  readonly jobId?: string;
  readonly claimId?: string;
  /** `batch`: D/jobs/<job>/…; `pair`: a `pair run` directory, files at its root. */
  readonly layout?: 'batch' | 'pair';
  /** Default true; false leaves result.json for the test to write. */
  readonly writeResult?: boolean;
}

export interface FinishedPair {
  readonly store: EvidenceStore;
  readonly jobRel: string;
  readonly receipt: Receipt;
  readonly result: ResultRecord;
  readonly outcomePath: string;
  readonly reservationId: string;
  readonly containerId: string;
}

export function sha256(bytes: string | Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

export async function buildFinishedPair(options: FinishedPairOptions): Promise<FinishedPair> {
  const batchId = options.batchId ?? 'batch-A';
  const jobId = options.jobId ?? 'pair-0001';
  const claimId = options.claimId ?? randomUUID();
  const layout = options.layout ?? 'batch';
  const jobRel = layout === 'pair' ? '.' : `jobs/${jobId}`;
  const rel = (name: string): string => (jobRel === '.' ? name : `${jobRel}/${name}`);
  await mkdir(options.root, { recursive: true, mode: 0o700 });
  const store = new EvidenceStore(options.fs ?? new NodeFileSystem(), options.root);
  if (layout === 'batch') {
    if (!(await store.exists('batch.json'))) await store.writeJsonAtomic('batch.json', { batch_id: batchId });
    await store.ensureDir(jobRel);
  }
  const admitted = await options.registry.admit({ batchId, jobId, claimId, gpuMib: 0 });
  if (admitted.kind === 'refused') throw new Error(`test set-up: admission refused (${admitted.reason})`);
  const reservationId = admitted.reservationId;
  const containerId = `c-${claimId.slice(0, 12)}`;
  const receipt: Receipt = {
    schema: RECEIPT_SCHEMA,
    batch_id: batchId,
    job_id: jobId,
    attempt: 1,
    claim_id: claimId,
    claimed_at: '2025-01-01T00:00:00.000Z',
    host_boot_id: 'boot-1',
    supervisor: { pid: 4242, start_ticks: '99', boot_id: 'boot-1' },
    reservation_id: reservationId,
    image: 'pair-driver:1',
    outcome_path: join(options.outcomeDir, `${jobId}.json`),
    source_sha256: { '/abs/driver.py': 'a'.repeat(64) },
    code_version: '0.1.0+test',
    container_id: null,
    container_name: `roboguide-${jobId}-${claimId.slice(0, 8)}`,
  };
  await store.publishExclusive(rel('receipt.json'), receipt);
  await options.registry.attachContainer(reservationId, containerId);
  const launched = { ...receipt, container_id: containerId };
  await store.writeJsonAtomic(rel('receipt.json'), launched);
  await store.writeBytesAtomic(rel('stdout.log'), new TextEncoder().encode('arm a done\narm b done\n'));
  await store.writeBytesAtomic(rel('stderr.log'), new Uint8Array());
  const outcome = {
    job_id: jobId,
    infrastructure_failure: false,
    fatal_failure: false,
    arms: { a: 'unavailable', b: true },
  };
  const outcomeText = JSON.stringify(outcome);
  await mkdir(options.outcomeDir, { recursive: true });
  await writeFile(launched.outcome_path, outcomeText);
  const result: ResultRecord = {
    schema: RESULT_SCHEMA,
    job_id: jobId,
    batch_id: batchId,
    claim_id: claimId,
    classification: 'completed',
    reasons: [],
    outcome,
    outcome_redactions: 0,
    outcome_sha256: sha256(outcomeText),
    container: { id: containerId, exit_code: 0, timed_out: false, oom_killed: false },
    logs: { stdout: { bytes: 22, closed: true }, stderr: { bytes: 0, closed: true } },
    sessions: { files: 0, bytes: 0, refusals: [] },
    provider_failure: null,
    provider_failure_error_kind: null,
    cleanup: { removed: true, verified_absent: true, attempts: 1 },
    engine_error: null,
    started_at: '2025-01-01T00:00:01.000Z',
    finished_at: '2025-01-01T00:10:00.000Z',
  };
  if (options.writeResult !== false) await store.writeJsonAtomic(rel('result.json'), result);
  return {
    store,
    jobRel,
    receipt: launched,
    result,
    outcomePath: launched.outcome_path,
    reservationId,
    containerId,
  };
}

/** A container runtime that knows only which containers exist (by id, or by claim label). */
export class FakeContainerRuntime implements Pick<ContainerRuntime, 'inspect' | 'listByLabel'> {
  readonly present = new Set<string>();
  readonly presentClaims = new Set<string>();
  failWith: Error | null = null;
  calls = 0;

  inspect(id: string): Promise<ContainerState | null> {
    this.calls += 1;
    if (this.failWith !== null) return Promise.reject(this.failWith);
    return Promise.resolve(this.present.has(id) ? stateOf(id, {}) : null);
  }

  listByLabel(labels: Readonly<Record<string, string>>): Promise<ContainerState[]> {
    this.calls += 1;
    if (this.failWith !== null) return Promise.reject(this.failWith);
    const claim = labels['roboguide.claim'];
    return Promise.resolve(
      claim !== undefined && this.presentClaims.has(claim) ? [stateOf('c-by-label', labels)] : [],
    );
  }
}

function stateOf(id: string, labels: Readonly<Record<string, string>>): ContainerState {
  return { id, status: 'exited', exitCode: 0, oomKilled: false, startedAt: null, finishedAt: null, labels };
}

export async function outcomeSha256OrNull(path: string): Promise<string | null> {
  const hash = createHash('sha256');
  try {
    for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  return hash.digest('hex');
}

/**
 * SHA-256 of every regular file under each directory, by path relative to it (temp files included).
 * Left out: SQLite's `-shm` WAL index, shared memory that readers update with their read marks; it
 * holds no data and is rebuilt on open. The database and its `-wal` (every committed write) count.
 */
export async function hashTree(...dirs: string[]): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const dir of dirs) {
    for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
      if (!entry.isFile() || entry.name.endsWith('.db-shm')) continue;
      const path = join(entry.parentPath, entry.name);
      out[`${dir}:${relative(dir, path)}`] = (await outcomeSha256OrNull(path)) ?? 'gone';
    }
  }
  return out;
}

/** A registry clock that moves one second per reading, so each timestamp tells which call wrote it. */
export function steppingClock(): Clock {
  let tick = 0;
  return clockAt(() => new Date(Date.UTC(2025, 0, 2) + 1000 * tick++));
}
