/**
 * A batch output directory made by `prepareBatch` itself (no engine: a stand-in that answers info and has every
 * image), and the files a supervisor would leave in it: receipts, results, its own identity. For the unit tests of
 * the small batch use-cases (continuation, stop, node-down, report…).
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import { SUPERVISOR_FILE } from '../../src/core/evidence-names.js';
import type { SupervisorRecord } from '../../src/core/supervisor-record.js';
import type { ExecutorConfig } from '../../src/core/executor.js';
import { RECEIPT_SCHEMA, type Receipt } from '../../src/core/receipt.js';
import { RESULT_SCHEMA, type ResultRecord } from '../../src/core/result.js';
import { answeringEngine } from './fakes.js';
import { clockAt } from './fake-time.js';

/** An engine that answers `info` and has every image: enough for prepareBatch. */
export const ANSWERING_ENGINE = answeringEngine();

export interface TestBatch {
  readonly dir: string;
  readonly output: string;
  readonly store: EvidenceStore;
  readonly batchId: string;
  readonly manifestPath: string;
}

/** A new batch in `dir/batch` with one job per id (outcomes under `dir/out`), through prepareBatch. */
export async function startTestBatch(
  dir: string,
  options: {
    readonly jobs?: readonly string[];
    readonly executor?: ExecutorConfig;
    readonly extra?: Record<string, unknown>;
  } = {},
): Promise<TestBatch> {
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    image: 'roboguide/pair-driver:1',
    ...options.extra,
    jobs: (options.jobs ?? ['a', 'b']).map((id) => ({
      job_id: id,
      argv: ['/opt/driver/run'],
      cwd: join(dir, 'cwd'),
      outcome_path: join(dir, 'out', `${id}.json`),
      timeout_seconds: 120,
    })),
  };
  const manifestPath = join(dir, 'm.json');
  await writeFile(manifestPath, JSON.stringify(manifest));
  const output = join(dir, 'batch');
  const executor = options.executor;
  const record = await prepareBatch(
    {
      fs: new NodeFileSystem(),
      host: procHostIdentity,
      runtime: ANSWERING_ENGINE,
      clock: clockAt(() => new Date('2026-12-02T10:00:00Z')),
      ...(executor?.kind === 'swarm'
        ? {
            swarmNodes: () =>
              Promise.resolve(
                Object.keys(executor.node_engines).map((node) => ({ node, id: `id-${node}`, gpus: 0 })),
              ),
          }
        : {}),
    },
    {
      manifestPath,
      output,
      registryPath: join(dir, 'r.db'),
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 't',
      ...(executor ? { executor } : {}),
    },
  );
  return {
    dir,
    output,
    store: new EvidenceStore(new NodeFileSystem(), output),
    batchId: record.batch_id,
    manifestPath,
  };
}

/** The receipt a supervisor publishes when it claims `jobId`. */
export async function claimJob(
  batch: TestBatch,
  jobId: string,
  claimId = `claim-${jobId}`,
  extra: Partial<Receipt> = {},
): Promise<Receipt> {
  const receipt: Receipt = {
    schema: RECEIPT_SCHEMA,
    batch_id: batch.batchId,
    job_id: jobId,
    attempt: 1,
    claim_id: claimId,
    claimed_at: '2026-12-02T10:00:01.000Z',
    host_boot_id: null,
    supervisor: { pid: 1, start_ticks: null, boot_id: null },
    reservation_id: null,
    image: 'roboguide/pair-driver:1',
    outcome_path: join(batch.dir, 'out', `${jobId}.json`),
    source_sha256: {},
    code_version: 't',
    container_id: `c-${jobId}`,
    container_name: `roboguide-${jobId}`,
    ...extra,
  };
  await batch.store.ensureDir(`jobs/${jobId}`);
  await batch.store.publishExclusive(`jobs/${jobId}/receipt.json`, receipt);
  return receipt;
}

/** The result.json of a claimed job (completed unless `extra` says otherwise). */
export async function finishJob(
  batch: TestBatch,
  receipt: Receipt,
  extra: Partial<ResultRecord> = {},
): Promise<ResultRecord> {
  const result: ResultRecord = {
    schema: RESULT_SCHEMA,
    job_id: receipt.job_id,
    batch_id: receipt.batch_id,
    claim_id: receipt.claim_id,
    classification: 'completed',
    reasons: [],
    outcome: null,
    outcome_redactions: 0,
    outcome_sha256: null,
    container: { id: receipt.container_id, exit_code: 0, timed_out: false, oom_killed: false },
    logs: { stdout: { bytes: 0, closed: true }, stderr: { bytes: 0, closed: true } },
    sessions: { files: 0, bytes: 0, refusals: [] },
    provider_failure: null,
    provider_failure_error_kind: null,
    cleanup: { removed: true, verified_absent: true, attempts: 1 },
    engine_error: null,
    started_at: '2026-12-02T10:00:02.000Z',
    finished_at: '2026-12-02T10:01:02.000Z',
    ...extra,
  };
  await batch.store.writeJsonAtomic(`jobs/${receipt.job_id}/result.json`, result);
  return result;
}

/** Record `identity` as the batch's supervisor (D/supervisor.json), as a supervisor does when it starts. */
export async function recordSupervisor(
  batch: TestBatch,
  identity: Omit<SupervisorRecord, 'started_at' | 'mode'>,
): Promise<void> {
  await batch.store.writeJsonAtomic(SUPERVISOR_FILE, {
    ...identity,
    started_at: '2026-12-02T10:00:00.000Z',
    mode: 'start',
  } satisfies SupervisorRecord);
}

export async function ensureDir(path: string): Promise<void> {
  await mkdir(path, { recursive: true });
}
