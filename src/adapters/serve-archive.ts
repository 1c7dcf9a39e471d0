import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { PassThrough, type Readable, type Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { pack as packDir } from 'tar-fs';
import { extract, pack, type Pack } from 'tar-stream';
import { DEFAULT_EXTRACT_LIMITS, extractArchiveSafely, planEntry, type ExtractLimits } from './safe-extract.js';

/**
 * Archives through the `serve` API (issue 12). In: the client's tar is checked entry by entry with the
 * safe-extraction rules (regular files and directories only, no absolute names, no `..`, the count and size
 * limits) and re-packed to a temporary file; only a clean archive reaches the container. Out: the container's
 * tar is extracted safely with every file passed through the redactor, then packed again, so sizes in the
 * headers are those of the redacted contents.
 */

export interface CheckedUpload {
  readonly path: string;
  readonly files: number;
  readonly bytes: number;
  readonly refusals: readonly string[];
  dispose(): Promise<void>;
}

const FRAMING_BYTES_PER_ENTRY = 4096;

/** Copies `body` into `limited` until it ends or passes `budget` bytes (then refused, and the body destroyed). */
async function feedWithin(body: Readable, limited: PassThrough, budget: number, refusals: string[]): Promise<void> {
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
}

/**
 * Reads the tar of `input` entry by entry with the safe-extraction rules and the limits, and packs every accepted
 * file and directory into `out` while nothing has been refused; refusals are collected, never thrown.
 */
async function repackChecked(input: PassThrough, out: Pack, limits: ExtractLimits, refusals: string[], count: RepackCount): Promise<void> {
  const parser = extract();
  let entries = 0;
  input.pipe(parser);
  try {
    for await (const entry of parser) {
      const header = entry.header;
      entries += 1;
      const plan = planEntry(header, 0);
      if (plan.kind === 'refuse') refusals.push(plan.reason);
      else if (entries > 2 * limits.maxFiles) refusals.push('too many entries');
      else if (plan.kind === 'file') {
        const size = header.size ?? 0;
        count.files += 1;
        count.bytes += size;
        if (count.files > limits.maxFiles) refusals.push('file count limit reached');
        else if (size > limits.maxFileBytes) refusals.push(`file size limit reached: ${plan.segments.join('/')}`);
        else if (count.bytes > limits.maxTotalBytes) refusals.push('archive size limit reached');
        else if (refusals.length === 0) {
          const target = out.entry({ name: plan.segments.join('/'), size, mode: (header.mode ?? 0o644) & 0o777, type: 'file', mtime: header.mtime ?? new Date() });
          await pipeline(entry, target);
          continue;
        }
      } else if (plan.kind === 'directory' && refusals.length === 0) {
        out.entry({ name: plan.segments.join('/'), type: 'directory', mode: (header.mode ?? 0o755) & 0o777, mtime: header.mtime ?? new Date() });
      }
      entry.resume();
    }
  } catch (err) {
    refusals.push(`not a valid tar archive (${(err as Error).message.slice(0, 80)})`);
  }
}

export async function checkUpload(body: Readable, tempRoot: string, limits: ExtractLimits = DEFAULT_EXTRACT_LIMITS): Promise<CheckedUpload> {
  const dir = await mkdtemp(join(tempRoot, 'upload-'));
  const path = join(dir, 'checked.tar');
  const refusals: string[] = [];
  const count: RepackCount = { files: 0, bytes: 0 };
  const out = pack();
  const written = pipeline(out, createWriteStream(path, { mode: 0o600 }));
  const budget = limits.maxTotalBytes + (2 * limits.maxFiles + 2) * FRAMING_BYTES_PER_ENTRY;
  const limited = new PassThrough();
  await Promise.all([feedWithin(body, limited, budget, refusals), repackChecked(limited, out, limits, refusals, count)]);
  out.finalize();
  await written.catch(() => undefined);
  return { path, files: count.files, bytes: count.bytes, refusals, dispose: () => rm(dir, { recursive: true, force: true }) };
}

/** The checked upload as a stream for the engine. */
export function openChecked(upload: CheckedUpload): Readable {
  return createReadStream(upload.path);
}

export interface RedactedDownload {
  readonly stream: Readable;
  readonly files: number;
  readonly refusals: readonly string[];
}

/** Extract safely (each file redacted), then pack again; the temporary folder goes when the stream closes. */
export async function redactedDownload(archive: Readable, tempRoot: string, redactor: () => Transform, signal?: AbortSignal): Promise<RedactedDownload> {
  const dir = await mkdtemp(join(tempRoot, 'download-'));
  const report = await extractArchiveSafely(archive, dir, { stripComponents: 0, transform: redactor, ...(signal ? { signal } : {}) });
  const stream = packDir(dir) as unknown as Readable;
  const cleanup = (): void => void rm(dir, { recursive: true, force: true });
  stream.once('close', cleanup);
  stream.once('end', cleanup);
  stream.once('error', cleanup);
  return { stream, files: report.files, refusals: report.refusals };
}
