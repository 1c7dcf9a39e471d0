import type { EgressInput } from '../egress/policy.js';
import type { Issue } from '../errors.js';
import { RoboguideError } from '../errors.js';
import { manifestCrossIssues, pairSpecCrossIssues } from './cross-rules.js';
import { ROOT_PATH } from './issue-path.js';
import { ManifestSchema, PairSpecSchema, type Job, type Manifest, type PairSpec } from './schema.js';
import { DEFAULT_RUNTIME } from '../oci-runtime.js';
import { withoutFollowOns, type Typo } from './typo-hints.js';
import { dedupeIssues, issuesFromZod, plainRule } from './zod-issues.js';

export type ManifestParse = { ok: true; manifest: Manifest } | { ok: false; issues: Issue[] };
export type PairSpecParse = { ok: true; spec: PairSpec } | { ok: false; issues: Issue[] };

/** Parses manifest text; every problem is reported at once, each with its JSON path. */
export function parseManifest(text: string): ManifestParse {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { ok: false, issues: [{ path: ROOT_PATH, rule: `is not valid JSON: ${jsonErrorSummary(err)}` }] };
  }
  const parsed = ManifestSchema.safeParse(value, { error: plainRule });
  const typos: Typo[] = [];
  const issues = withoutFollowOns(
    dedupeIssues([
      ...(parsed.success ? [] : issuesFromZod(parsed.error, { schema: ManifestSchema, value, typos })),
      ...manifestCrossIssues(value),
    ]),
    typos,
  );
  if (!parsed.success || issues.length > 0) return { ok: false, issues };
  return { ok: true, manifest: parsed.data };
}

/** Validates an already-decoded `pair run` spec (one job at the root, `image` required). */
export function parsePairSpec(value: unknown): PairSpecParse {
  const parsed = PairSpecSchema.safeParse(value, { error: plainRule });
  const typos: Typo[] = [];
  const issues = withoutFollowOns(
    dedupeIssues([
      ...(parsed.success ? [] : issuesFromZod(parsed.error, { schema: PairSpecSchema, value, typos })),
      ...pairSpecCrossIssues(value),
    ]),
    typos,
  );
  if (!parsed.success || issues.length > 0) return { ok: false, issues };
  return { ok: true, spec: parsed.data };
}

/** The job's image: its own override, else the manifest default (parse guarantees one). */
export function jobImage(manifest: Pick<Manifest, 'image'>, job: Pick<Job, 'image' | 'job_id'>): string {
  const image = job.image ?? manifest.image;
  if (image === undefined) {
    throw new RoboguideError('E_INTERNAL', `job ${job.job_id} has no image and the manifest has no default`);
  }
  return image;
}

/** The job's OCI runtime: its own, else the manifest's (default "runc"). */
/** The job's egress policy as written (its own, else the manifest's), before the network's mapping. */
export function jobEgress(
  manifest: Pick<Manifest, 'egress'>,
  job: Pick<Job, 'egress'>,
): EgressInput | undefined {
  return job.egress ?? manifest.egress;
}

export function jobRuntime(manifest: Pick<Manifest, 'runtime'>, job: Pick<Job, 'runtime'>): string {
  return job.runtime ?? manifest.runtime ?? DEFAULT_RUNTIME;
}

/**
 * JSON.parse messages quote a slice of the input, which may hold a secret: keep only the
 * position information.
 */
export function jsonErrorSummary(err: unknown): string {
  const message = err instanceof Error ? err.message : '';
  const position = /position (\d+)/.exec(message)?.[1];
  const lineColumn = /line (\d+) column (\d+)/.exec(message);
  if (lineColumn !== null) return `syntax error at line ${lineColumn[1]} column ${lineColumn[2]}`;
  if (position !== undefined) return `syntax error at position ${position}`;
  if (message.startsWith('Unexpected end')) return 'unexpected end of input';
  return 'syntax error';
}
