import { resolve } from 'node:path';
import { ExitCode, InvalidInputError, RoboguideError, type Issue } from '../core/errors.js';
import { parseManifest, type Manifest } from '../core/manifest/index.js';
import { errnoOf, type FileSystem } from './ports/file-system.js';

export interface LoadedManifest {
  /** The exact input bytes: frozen byte-identical into the output directory (SPEC §3). */
  readonly bytes: Uint8Array;
  readonly manifest: Manifest;
}

/** Reads and validates a manifest file; any problem is an InvalidInputError (exit 2). */
export async function loadManifest(fs: FileSystem, path: string): Promise<LoadedManifest> {
  // Every message names the file as an absolute path: a relative one says nothing about where it was looked for.
  const file = resolve(path);
  const bytes = await readManifestBytes(fs, file);
  const text = decodeUtf8(bytes);
  const parsed = text === undefined ? invalid('is not valid UTF-8') : parseManifest(text);
  if (!parsed.ok) throw manifestInvalid(file, parsed.issues);
  return { bytes, manifest: parsed.manifest };
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

function manifestInvalid(file: string, issues: readonly Issue[], cause?: unknown): InvalidInputError {
  return new InvalidInputError(
    'E_MANIFEST_INVALID',
    `manifest ${file} is invalid`,
    issues,
    cause === undefined ? {} : { cause },
  );
}
