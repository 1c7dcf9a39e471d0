import { resolve } from 'node:path';
import { ExitCode, InvalidInputError, RoboguideError, type Issue } from '../core/errors.js';
import { parseManifest } from '../core/manifest/parse.js';
import type { Manifest } from '../core/manifest/schema.js';
import { type ResolveOptions, environmentIssues, groupedByJob } from '../core/manifest/environment.js';
import { errnoOf, type FileSystem } from './ports/file-system.js';

export interface LoadedManifest {
  /** The exact input bytes: frozen byte-identical into the output directory (SPEC §3). */
  readonly bytes: Uint8Array;
  readonly manifest: Manifest;
}

/**
 * Reads and validates a manifest file; any problem is an InvalidInputError (exit 2). With `environment`, a manifest
 * refused for its fields also names the `${NAME}` variables its jobs reference that are not set (issue 40: every
 * error of a manifest in one run, not the unset variables only once the rest is fixed).
 */
export async function loadManifest(
  fs: FileSystem,
  path: string,
  environment?: {
    readonly source: Readonly<Record<string, string | undefined>>;
    readonly options?: ResolveOptions;
  },
): Promise<LoadedManifest> {
  // Every message names the file as an absolute path: a relative one says nothing about where it was looked for.
  const file = resolve(path);
  const bytes = await readManifestBytes(fs, file);
  const text = decodeUtf8(bytes);
  const parsed = text === undefined ? invalid('is not valid UTF-8') : parseManifest(text);
  if (!parsed.ok) {
    const raw = text === undefined ? null : rawJobs(text);
    const unset =
      raw === null || environment === undefined
        ? []
        : environmentIssues(raw, environment.source, undefined, environment.options).issues;
    const ids = raw?.map((job) => job.job_id) ?? [];
    const all = [...parsed.issues, ...unset];
    throw manifestInvalid(file, all, undefined, groupedByJob(all, ids));
  }
  return { bytes, manifest: parsed.manifest };
}

/** The jobs of a manifest refused for its fields: each one's id (else its place) and the string values of its environment. */
function rawJobs(text: string): { job_id: string; environment: Record<string, string> }[] | null {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  const jobs = typeof value === 'object' && value !== null ? (value as { jobs?: unknown }).jobs : undefined;
  if (!Array.isArray(jobs)) return null;
  return jobs.map((job: unknown, i) => {
    const { job_id: id, environment: env } = (typeof job === 'object' && job !== null ? job : {}) as {
      job_id?: unknown;
      environment?: unknown;
    };
    const strings =
      typeof env === 'object' && env !== null && !Array.isArray(env)
        ? Object.fromEntries(
            Object.entries(env).filter((e): e is [string, string] => typeof e[1] === 'string'),
          )
        : {};
    return { job_id: typeof id === 'string' ? id : `jobs[${i}]`, environment: strings };
  });
}

async function readManifestBytes(fs: FileSystem, file: string): Promise<Uint8Array> {
  try {
    return await fs.readUserFile(file);
  } catch (err) {
    const code = errnoOf(err) ?? 'unknown error';
    if (code === 'ENOENT') {
      throw new RoboguideError('E_USAGE', `manifest not found: ${file}`, {
        cause: err,
        exitCode: ExitCode.invalidInput,
        suggestions: [`check the path: there is no file at ${file}`],
      });
    }
    throw manifestInvalid(file, [{ path: '$', rule: `cannot read file: ${code}` }], err);
  }
}

function decodeUtf8(bytes: Uint8Array): string | undefined {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return undefined;
  }
}

function invalid(rule: string): { ok: false; issues: Issue[] } {
  return { ok: false, issues: [{ path: '$', rule }] };
}

function manifestInvalid(
  file: string,
  issues: readonly Issue[],
  cause?: unknown,
  shown?: readonly Issue[],
): InvalidInputError {
  return new InvalidInputError('E_MANIFEST_INVALID', `manifest ${file} is invalid`, issues, {
    ...(cause === undefined ? {} : { cause }),
    ...(shown === undefined ? {} : { shown }),
  });
}
