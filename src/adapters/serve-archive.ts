import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { join, posix } from 'node:path';
import { PassThrough, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { extract, pack, type Pack } from 'tar-stream';
import { planEntry, sanitizeLabel } from './archive-entry-plan.js';
import { DEFAULT_EXTRACT_LIMITS, type ExtractLimits } from './safe-extract.js';

/**
 * Uploads through the `serve` API (issues 12, 23): the client's tar is checked entry by entry with the
 * safe-extraction rules (regular files, directories and symbolic links whose target stays inside the destination;
 * no absolute names, no `..`, no hard links or special files, the count and size limits) and re-packed to a
 * temporary file with its permission bits (no setuid/setgid/sticky); only a clean archive reaches the container.
 * Downloads: see http/serve-files.ts.
 */

export interface CheckedUpload {
  readonly path: string;
  readonly files: number;
  readonly bytes: number;
  readonly refusals: readonly string[];
  /** Names (relative to the destination) the archive writes as files or links: none may replace a directory. */
  readonly nonDirectories: readonly string[];
  dispose(): Promise<void>;
}

const FRAMING_BYTES_PER_ENTRY = 4096;

/** Copies `body` into `limited` until it ends or passes `budget` bytes (then refused, and the body destroyed). */
async function feedWithin(
  body: Readable,
  limited: PassThrough,
  budget: number,
  refusals: string[],
): Promise<void> {
  let fed = 0;
  try {
    for await (const chunk of body) {
      fed += (chunk as Buffer).length;
      if (fed > budget) {
        refusals.push('archive size limit reached');
        limited.end();
        body.destroy();
        return;
      }
      if (!limited.write(chunk)) await new Promise((resolve) => limited.once('drain', resolve));
    }
    limited.end();
  } catch {
    refusals.push('request body ended early');
    limited.end();
  }
}

interface RepackCount {
  files: number;
  bytes: number;
  readonly nonDirectories: string[];
}

/**
 * A symbolic link of an upload: kept when its target, read from the link's own folder, stays inside the
 * destination (relative, no climbing out, no NUL); the reason otherwise.
 */
export function linkRefusal(name: string, target: string): string | null {
  const label = sanitizeLabel(name);
  if (target === '' || target.includes('\0')) return `symlink with an empty or NUL target refused: ${label}`;
  if (target.startsWith('/')) return `symlink to an absolute path refused: ${label}`;
  const resolved = posix.normalize(posix.join(posix.dirname(name), target));
  if (resolved === '..' || resolved.startsWith('../'))
    return `symlink escaping the destination refused: ${label}`;
  return null;
}

/**
 * Reads the tar of `input` entry by entry with the safe-extraction rules and the limits, and packs every accepted
 * file and directory into `out` while nothing has been refused; refusals are collected, never thrown.
 */
async function repackChecked(
  input: PassThrough,
  out: Pack,
  limits: ExtractLimits,
  refusals: string[],
  count: RepackCount,
): Promise<void> {
  const parser = extract();
  let entries = 0;
  input.pipe(parser);
  try {
    for await (const entry of parser) {
      const header = entry.header;
      entries += 1;
      const plan = planEntry(header.type === 'symlink' ? { name: header.name, type: 'file' } : header, 0);
      if (plan.kind !== 'refuse' && header.name.includes('\n'))
        refusals.push(`name with a newline refused: ${sanitizeLabel(header.name)}`);
      else if (plan.kind === 'refuse') refusals.push(plan.reason);
      else if (entries > 2 * limits.maxFiles) refusals.push('too many entries');
      else if (header.type === 'symlink' && plan.kind === 'file') {
        const name = plan.segments.join('/');
        const refusal = linkRefusal(name, header.linkname ?? '');
        if (refusal !== null) refusals.push(refusal);
        else if (refusals.length === 0) {
          count.nonDirectories.push(name);
          out.entry({
            name,
            type: 'symlink',
            linkname: header.linkname ?? '',
            mode: 0o777,
            mtime: header.mtime ?? new Date(),
          });
        }
      } else if (plan.kind === 'file') {
        const size = header.size ?? 0;
        count.files += 1;
        count.bytes += size;
        if (count.files > limits.maxFiles) refusals.push('file count limit reached');
        else if (size > limits.maxFileBytes)
          refusals.push(`file size limit reached: ${plan.segments.join('/')}`);
        else if (count.bytes > limits.maxTotalBytes) refusals.push('archive size limit reached');
        else if (refusals.length === 0) {
          count.nonDirectories.push(plan.segments.join('/'));
          const target = out.entry({
            name: plan.segments.join('/'),
            size,
            mode: (header.mode ?? 0o644) & 0o777,
            type: 'file',
            mtime: header.mtime ?? new Date(),
          });
          await pipeline(entry, target);
          continue;
        }
      } else if (plan.kind === 'directory' && refusals.length === 0) {
        out.entry({
          name: plan.segments.join('/'),
          type: 'directory',
          mode: (header.mode ?? 0o755) & 0o777,
          mtime: header.mtime ?? new Date(),
        });
      }
      entry.resume();
    }
  } catch (err) {
    refusals.push(`not a valid tar archive (${(err as Error).message.slice(0, 80)})`);
  }
}

export async function checkUpload(
  body: Readable,
  tempRoot: string,
  limits: ExtractLimits = DEFAULT_EXTRACT_LIMITS,
): Promise<CheckedUpload> {
  const dir = await mkdtemp(join(tempRoot, 'upload-'));
  const path = join(dir, 'checked.tar');
  const refusals: string[] = [];
  const count: RepackCount = { files: 0, bytes: 0, nonDirectories: [] };
  const out = pack();
  const written = pipeline(out, createWriteStream(path, { mode: 0o600 }));
  const budget = limits.maxTotalBytes + (2 * limits.maxFiles + 2) * FRAMING_BYTES_PER_ENTRY;
  const limited = new PassThrough();
  await Promise.all([
    feedWithin(body, limited, budget, refusals),
    repackChecked(limited, out, limits, refusals, count),
  ]);
  out.finalize();
  await written.catch(() => undefined);
  return {
    path,
    files: count.files,
    bytes: count.bytes,
    refusals,
    nonDirectories: count.nonDirectories,
    dispose: () => rm(dir, { recursive: true, force: true }),
  };
}

/** The checked upload as a stream for the engine. */
export function openChecked(upload: CheckedUpload): Readable {
  return createReadStream(upload.path);
}
