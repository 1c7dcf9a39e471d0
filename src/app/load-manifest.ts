import { readFile } from 'node:fs/promises';
import { InvalidInputError, type Issue } from '../core/errors.js';
import { parseManifest, type Manifest } from '../core/manifest/index.js';

export interface LoadedManifest {
  /** The exact input bytes: frozen byte-identical into the output directory (SPEC §3). */
  readonly bytes: Buffer;
  readonly manifest: Manifest;
}

/** Reads and validates a manifest file; any problem is an InvalidInputError (exit 2). */
export async function loadManifest(file: string): Promise<LoadedManifest> {
  const bytes = await readManifestBytes(file);
  const text = decodeUtf8(bytes);
  const parsed = text === undefined ? invalid('is not valid UTF-8') : parseManifest(text);
  if (!parsed.ok) throw manifestInvalid(file, parsed.issues);
  return { bytes, manifest: parsed.manifest };
}

async function readManifestBytes(file: string): Promise<Buffer> {
  try {
    return await readFile(file);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'unknown error';
    throw manifestInvalid(file, [{ path: '$', rule: `cannot read file: ${code}` }], err);
  }
}

function decodeUtf8(bytes: Buffer): string | undefined {
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
