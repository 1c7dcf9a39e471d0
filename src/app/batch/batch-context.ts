import { isBatchRecord, receiptRel, resultRel, type BatchRecord } from './layout.js';
import { isReceipt, type Receipt } from '../../core/receipt.js';
import { isResultRecord, type ResultRecord } from '../../core/result.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import { InvalidInputError, RoboguideError, type Issue } from '../../core/errors.js';
import {
  environmentIssues,
  groupedByJob,
  type ResolvedJobEnvironment,
  type ResolveOptions,
} from '../../core/manifest/environment.js';
import { parseManifest } from '../../core/manifest/parse.js';
import type { Job, Manifest } from '../../core/manifest/schema.js';
import { BATCH_FILE, MANIFEST_FILE } from '../../core/evidence-names.js';

/** Resolve every job's `${NAME}` references now: fail fast, naming the job path and variable, never a value. */
export function resolveAllEnvironments(
  manifest: Manifest,
  source: Readonly<Record<string, string | undefined>>,
  only?: ReadonlySet<string>,
  options: ResolveOptions = {},
): Map<string, ResolvedJobEnvironment> {
  const { resolved, issues } = environmentIssues(manifest.jobs, source, only, options);
  if (issues.length > 0) throw environmentMissing(issues, manifest.jobs);
  return resolved;
}

/** E_ENV_MISSING: every issue in `issues` (JSON); printed one line per variable and rule, the jobs counted. */
export function environmentMissing(
  issues: readonly Issue[],
  jobs: readonly Pick<Manifest['jobs'][number], 'job_id'>[],
): InvalidInputError {
  return new InvalidInputError(
    'E_ENV_MISSING',
    'the manifest references variables that are not set or not usable',
    issues,
    {
      shown: groupedByJob(
        issues,
        jobs.map((job) => job.job_id),
      ),
      suggestions: [
        'export the named variables in the environment that runs start/resume (values of 8+ characters)',
      ],
    },
  );
}

/** The frozen batch: identity and the manifest as it was given. */
export interface LoadedBatch {
  readonly batch: BatchRecord;
  readonly manifest: Manifest;
  readonly manifestBytes: Uint8Array;
}

export async function loadBatch(store: EvidenceStore): Promise<LoadedBatch> {
  const batch = await store.readJson(BATCH_FILE, isBatchRecord);
  if (batch === null) {
    throw new RoboguideError(
      'E_BATCH_STATE',
      `${store.root} is not a batch output directory (no ${BATCH_FILE})`,
      { exitCode: 2 },
    );
  }
  const manifestBytes = await store.readBytes(MANIFEST_FILE);
  if (manifestBytes === null) {
    // `start` died between publishing batch.json and freezing the manifest: nothing was claimed or run.
    throw new RoboguideError(
      'E_BATCH_STATE',
      `${store.root}: the batch was never fully created (no ${MANIFEST_FILE})`,
      {
        exitCode: 2,
        suggestions: ['nothing ran: start the batch again with a new --output directory'],
      },
    );
  }
  const parsed = parseManifest(new TextDecoder().decode(manifestBytes));
  if (!parsed.ok)
    throw new RoboguideError('E_BATCH_STATE', `the frozen ${MANIFEST_FILE} no longer validates`, {
      exitCode: 1,
    });
  return { batch, manifest: parsed.manifest, manifestBytes };
}

export interface JobFiles {
  readonly job: Job;
  readonly receipt: Receipt | null;
  readonly result: ResultRecord | null;
}

/** Receipts and results of every job, in manifest order: the source of truth for claims and finishes. */
export async function readJobFiles(store: EvidenceStore, manifest: Manifest): Promise<JobFiles[]> {
  return Promise.all(
    manifest.jobs.map(async (job) => ({
      job,
      receipt: await store.readJson(receiptRel(job.job_id), isReceipt),
      result: await store.readJson(resultRel(job.job_id), isResultRecord),
    })),
  );
}
