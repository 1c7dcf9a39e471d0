import type { EvidenceStore } from '../evidence/evidence-store.js';
import { foldJournal } from '../../core/batch-state.js';
import type { FileSystem } from '../ports/file-system.js';
import type { HostIdentity } from '../ports/host-identity.js';
import { RoboguideError } from '../../core/errors.js';
import { loadBatch, readJobFiles } from './batch-context.js';
import { runningSupervisor } from './supervisor-liveness.js';

export interface ContinuationOutcome {
  readonly manifest_out: string;
  readonly batch_id: string;
  readonly jobs: number;
  readonly excluded_claimed: number;
}

/** Write the continuation manifest: the original, minus every claimed job, plus `continuation_of`. */
export async function writeContinuation(
  store: EvidenceStore,
  options: { manifestOut: string; codeVersion: string; fs: FileSystem; host: Pick<HostIdentity, 'isAlive'> },
): Promise<ContinuationOutcome> {
  const { batch, manifest, manifestBytes } = await loadBatch(store);
  const fold = foldJournal(await store.readJournal());
  if (!fold.pauseReasons.includes('fatal')) {
    throw new RoboguideError(
      'E_BATCH_STATE',
      `batch ${batch.batch_id} has no fatal pause; a continuation is for fatal pauses`,
      {
        exitCode: 2,
        suggestions: ['use `e1-batch resume` to continue a stopped or paused batch'],
      },
    );
  }
  const supervisor = await runningSupervisor(store, options.host);
  if (supervisor !== null) {
    throw new RoboguideError(
      'E_SUPERVISOR_ALIVE',
      `the supervisor of batch ${batch.batch_id} is still running (pid ${supervisor.pid}); wait until it exits`,
    );
  }
  const files = await readJobFiles(store, manifest);
  const claimed = new Set(files.filter((f) => f.receipt !== null).map((f) => f.job.job_id));
  const original = JSON.parse(Buffer.from(manifestBytes).toString('utf8')) as {
    jobs: { job_id: string }[];
  } & Record<string, unknown>;
  const jobs = original.jobs.filter((j) => !claimed.has(j.job_id));
  if (jobs.length === 0)
    throw new RoboguideError('E_BATCH_STATE', 'every job of the batch was claimed: nothing to continue', {
      exitCode: 2,
    });
  const next = {
    ...original,
    jobs,
    continuation_of: { batch_id: batch.batch_id, output: store.root, code_version: options.codeVersion },
  };
  try {
    await writeNewFile(
      options.fs,
      options.manifestOut,
      new TextEncoder().encode(`${JSON.stringify(next, null, 2)}\n`),
    );
  } catch (err) {
    throw new RoboguideError(
      'E_USAGE',
      `cannot write ${options.manifestOut}: ${(err as NodeJS.ErrnoException).code ?? 'error'}`,
      { exitCode: 2, cause: err },
    );
  }
  return {
    manifest_out: options.manifestOut,
    batch_id: batch.batch_id,
    jobs: jobs.length,
    excluded_claimed: claimed.size,
  };
}

/** A new file (never replacing one, never through a symlink), mode 0600, written whole. */
async function writeNewFile(fs: FileSystem, path: string, bytes: Uint8Array): Promise<void> {
  const handle = await fs.open(path, 'create-exclusive', 0o600);
  try {
    for (let done = 0; done < bytes.byteLength;) done += await handle.write(bytes.subarray(done));
  } finally {
    await handle.close();
  }
}
