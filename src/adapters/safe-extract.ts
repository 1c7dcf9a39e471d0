import { constants } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { lstat, mkdir, open, realpath, rename, unlink } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Extract, Header, extract as extractFn } from 'tar-stream';
import { planEntry, sanitizeLabel } from './archive-entry-plan.js';
import { codeOf, drain, drainedOrClosed, isDestroyable, toBuffer } from './tar-stream-helpers.js';

/**
 * Safe extraction of a tar stream copied out of a container (SPEC §4 `sessions/`, §5 step 6).
 * Only regular files (0600) and directories (0700) are created, strictly inside the target; each file is
 * written under a temp name outside the target, fsynced and renamed into place (a regular file left by an
 * interrupted collection is replaced whole; anything else already there is refused);
 * links, devices and fifos are refused; names with `..`, absolute names and NULs are refused;
 * an existing symlink inside the target is never followed; file-count and size limits are
 * checked against the header before any byte is written and again against the bytes written.
 * Every refusal or failure of the archive is recorded in the report: nothing is thrown except
 * programming errors, so a caller on a cleanup path can always go on.
 */

export interface ExtractLimits {
  readonly maxFiles: number;
  readonly maxTotalBytes: number;
  readonly maxFileBytes: number;
}

export const DEFAULT_EXTRACT_LIMITS: ExtractLimits = Object.freeze({
  maxFiles: 10_000,
  maxTotalBytes: 1024 ** 3,
  maxFileBytes: 256 * 1024 ** 2,
});

import type { ExtractReport } from '../app/ports/session-archive.js';
import { InternalError, ToolError } from '../core/errors.js';
import { makeDirs } from './fs/make-dirs.js';

export interface ExtractOptions {
  readonly limits?: ExtractLimits;
  /** Leading path components dropped from every name; default 1 (the requested directory itself). */
  readonly stripComponents?: number;
  /** A fresh transform for each file, e.g. a redactor. */
  readonly transform?: () => NodeJS.ReadWriteStream;
  /**
   * Applied to every archive name before it is planned, created or put in a refusal (e.g. masks a
   * secret in a file name). Its result is checked like any name.
   */
  readonly redactName?: (name: string) => string;
  readonly signal?: AbortSignal;
  /**
   * Where each file is written first (then fsynced and renamed into place): outside the target, so no name an
   * archive can hold is ever one of ours. Default: the target's parent folder. Must be on the same file system.
   */
  readonly tempDir?: string;
}

const MAX_RECORDED_REFUSALS = 50;
/** Tar framing allowed per entry beyond the data limits (header, pax records, padding). */
const FRAMING_BYTES_PER_ENTRY = 4096;
const FILE_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;

class LimitExceeded extends ToolError {
  constructor(message: string) {
    super('E_LIMIT_EXCEEDED', message);
  }
}

class Extraction {
  private files = 0;
  private bytes = 0;
  private otherEntries = 0;
  private declaredBytes = 0;
  private readonly refusals: string[] = [];
  private unrecorded = 0;
  private stopReason: string | undefined;
  private readonly verifiedDirs = new Set<string>();
  /** Files this extraction put in place: a second entry with the same name is refused, the first kept. */
  private readonly placed = new Set<string>();
  private readonly insidePrefix: string;

  constructor(
    readonly extractor: Extract,
    private readonly archive: NodeJS.ReadableStream,
    private readonly root: string,
    private readonly limits: ExtractLimits,
    private readonly stripComponents: number,
    private readonly transform: (() => NodeJS.ReadWriteStream) | undefined,
    private readonly tempDir: string,
    private readonly redactName: ((name: string) => string) | undefined,
  ) {
    this.insidePrefix = root.endsWith(sep) ? root : root + sep;
    this.extractor.on('error', () => {
      // Reported through the iteration; the listener keeps the emitter from throwing.
    });
  }

  get stopped(): boolean {
    return this.stopReason !== undefined;
  }

  refuse(reason: string): void {
    if (this.refusals.length < MAX_RECORDED_REFUSALS) this.refusals.push(reason);
    else this.unrecorded += 1;
  }

  /** First reason wins; the source is destroyed so nothing more is pulled out of the container. */
  stop(reason: string): void {
    if (this.stopReason !== undefined) return;
    this.stopReason = reason;
    this.refuse(reason);
    if (isDestroyable(this.archive)) this.archive.destroy();
    this.extractor.destroy();
  }

  report(): ExtractReport {
    const refusals = [...this.refusals];
    if (this.unrecorded > 0) refusals.push(`${this.unrecorded} more refusals not recorded`);
    return { files: this.files, bytes: this.bytes, refusals, truncated: this.stopped };
  }

  /** Copies the archive into the tar parser with backpressure, within the archive byte budget. */
  async feed(): Promise<void> {
    const { maxTotalBytes, maxFiles } = this.limits;
    const budgetBytes = maxTotalBytes + (2 * maxFiles + 2) * FRAMING_BYTES_PER_ENTRY;
    let fedBytes = 0;
    try {
      for await (const chunk of this.archive) {
        if (this.stopped) break;
        const buffer = toBuffer(chunk);
        fedBytes += buffer.length;
        if (fedBytes > budgetBytes) {
          this.stop('archive size limit reached');
          break;
        }
        if (!this.extractor.write(buffer)) await drainedOrClosed(this.extractor);
      }
      if (!this.stopped) this.extractor.end(null);
    } catch (err) {
      this.stop(`archive stream error: ${codeOf(err)}`);
    }
  }

  async run(): Promise<void> {
    try {
      for await (const entry of this.extractor) {
        await this.handle(entry.header, entry);
        if (this.stopped) break;
      }
    } catch (err) {
      this.stop(`archive invalid: ${codeOf(err)}`);
    }
  }

  private async handle(header: Header, entry: AsyncIterable<unknown>): Promise<void> {
    const name = this.redactName === undefined ? header.name : this.redactName(header.name);
    const label = sanitizeLabel(name);
    if (!this.withinSizeLimits(header.size, label)) return;
    const plan = planEntry({ name, type: header.type }, this.stripComponents);
    if (plan.kind === 'file') {
      if (this.files >= this.limits.maxFiles)
        return this.stop(`file count limit reached (${this.limits.maxFiles})`);
      return this.writeFile(plan.segments, header.size, label, entry);
    }
    if ((this.otherEntries += 1) > this.limits.maxFiles) return this.stop('entry count limit reached');
    if (plan.kind === 'refuse') this.refuse(plan.reason);
    else if (plan.kind === 'directory') await this.ensureDirs(plan.segments, plan.segments.length, label);
    await drain(entry);
  }

  private withinSizeLimits(sizeBytes: number, label: string): boolean {
    if (sizeBytes > this.limits.maxFileBytes) {
      this.stop(`file too large: ${label} (${sizeBytes} bytes)`);
      return false;
    }
    this.declaredBytes += sizeBytes;
    if (this.declaredBytes > this.limits.maxTotalBytes) {
      this.stop(`total size limit reached at ${label}`);
      return false;
    }
    return true;
  }

  /** Creates (or verifies) the first `count` segments as real directories; false when refused. */
  private async ensureDirs(segments: readonly string[], count: number, label: string): Promise<boolean> {
    for (let depth = 1; depth <= count; depth += 1) {
      const relative = segments.slice(0, depth).join('/');
      if (this.verifiedDirs.has(relative)) continue;
      const path = join(this.root, ...segments.slice(0, depth));
      try {
        await mkdir(path, { mode: 0o700 });
      } catch (err) {
        if ((err as { code?: unknown }).code !== 'EEXIST') {
          this.refuse(`create failed: ${label}: ${codeOf(err)}`);
          return false;
        }
      }
      const info = await lstat(path).catch(() => undefined);
      if (info?.isDirectory() !== true) {
        this.refuse(
          `${info?.isSymbolicLink() === true ? 'symlink' : 'non-directory'} in path refused: ${label}`,
        );
        return false;
      }
      this.verifiedDirs.add(relative);
    }
    return true;
  }

  private async writeFile(
    segments: readonly string[],
    sizeBytes: number,
    label: string,
    entry: AsyncIterable<unknown>,
  ): Promise<void> {
    const dest = resolve(this.root, ...segments);
    if (!dest.startsWith(this.insidePrefix)) this.refuse(`outside target refused: ${label}`);
    else if (
      (await this.ensureDirs(segments, segments.length - 1, label)) &&
      (await this.replaceable(dest, label))
    ) {
      const temp = join(this.tempDir, `.session-file.tmp-${process.pid}-${randomBytes(8).toString('hex')}`);
      const handle = await this.create(temp, label);
      if (handle !== undefined) return this.fill(handle, temp, dest, sizeBytes, label, entry);
    }
    await drain(entry);
  }

  /**
   * Nothing at `dest`, or a regular file left by an earlier, interrupted collection (a reattach replaces it
   * whole). A name this extraction already placed, a symlink or anything else is refused and left alone.
   */
  private async replaceable(dest: string, label: string): Promise<boolean> {
    if (this.placed.has(dest)) {
      this.refuse(`existing path refused: ${label}`);
      return false;
    }
    try {
      if ((await lstat(dest)).isFile()) return true;
    } catch (err) {
      if (codeOf(err) === 'ENOENT') return true;
      this.refuse(`create failed: ${label}: ${codeOf(err)}`);
      return false;
    }
    this.refuse(`existing path refused: ${label}`);
    return false;
  }

  private async create(temp: string, label: string): Promise<FileHandle | undefined> {
    try {
      return await open(temp, FILE_FLAGS, 0o600);
    } catch (err) {
      this.refuse(`create failed: ${label}: ${codeOf(err)}`);
      return undefined;
    }
  }

  /** Copy into the temp file, fsync, close, rename over `dest`; any failure removes the temp file only. */
  private async fill(
    handle: FileHandle,
    temp: string,
    dest: string,
    sizeBytes: number,
    label: string,
    entry: AsyncIterable<unknown>,
  ): Promise<void> {
    let failure: string | undefined;
    let written = 0;
    try {
      written = await this.copy(entry, handle, sizeBytes, label);
      await handle.sync();
    } catch (err) {
      failure = err instanceof LimitExceeded ? err.message : `write failed: ${label}: ${codeOf(err)}`;
    }
    try {
      await handle.close();
    } catch (err) {
      failure ??= `write failed: ${label}: ${codeOf(err)}`;
    }
    if (failure === undefined) {
      try {
        await rename(temp, dest);
        this.placed.add(dest);
        this.files += 1;
        this.bytes += written;
        return;
      } catch (err) {
        failure = `write failed: ${label}: ${codeOf(err)}`;
      }
    }
    await unlink(temp).catch(() => undefined);
    this.stop(failure);
  }

  /** Streams one entry (through the transform) into the file; returns the bytes written. */
  private async copy(
    entry: AsyncIterable<unknown>,
    handle: FileHandle,
    sizeBytes: number,
    label: string,
  ): Promise<number> {
    const read = async function* (this: void): AsyncGenerator<Buffer> {
      let readBytes = 0;
      for await (const chunk of entry) {
        const buffer = toBuffer(chunk);
        readBytes += buffer.length;
        yield buffer;
      }
      if (readBytes !== sizeBytes) throw new InternalError(`archive ended inside ${label}`);
    };
    let written = 0;
    const write = async (source: AsyncIterable<unknown>): Promise<void> => {
      for await (const chunk of source) {
        const buffer = toBuffer(chunk);
        written += buffer.length;
        if (written > this.limits.maxFileBytes) throw new LimitExceeded(`file too large: ${label} (written)`);
        if (this.bytes + written > this.limits.maxTotalBytes) {
          throw new LimitExceeded(`total size limit reached at ${label} (written)`);
        }
        await handle.write(buffer);
      }
    };
    if (this.transform === undefined) await write(read());
    else await pipeline(read, this.transform(), write);
    return written;
  }
}

async function prepareTarget(targetDir: string): Promise<string> {
  await makeDirs(targetDir, 0o700);
  const root = await realpath(targetDir);
  if (!(await lstat(root)).isDirectory()) throw new ToolError('ENOTDIR', 'not a directory');
  return root;
}

function destroySource(archive: NodeJS.ReadableStream): void {
  if (isDestroyable(archive)) archive.destroy();
}

/**
 * The tar reader, loaded on the first extraction: most pairs have no sessions to copy out, and importing it (with
 * streamx and its helpers, about 9 ms) was paid by every `pair run` at its start (issue 39).
 */
function tarExtractor(): Promise<typeof extractFn> {
  return (loadingTarStream ??= import('tar-stream').then((tar) => tar.extract));
}
let loadingTarStream: Promise<typeof extractFn> | undefined;

/**
 * Extracts `archive` (a tar stream, e.g. dockerode `getArchive`) into `targetDir` safely.
 * Resolves with a report in every case the archive or the filesystem can cause.
 */
export async function extractArchiveSafely(
  archive: NodeJS.ReadableStream,
  targetDir: string,
  options: ExtractOptions = {},
): Promise<ExtractReport> {
  const limits = options.limits ?? DEFAULT_EXTRACT_LIMITS;
  const stripComponents = options.stripComponents ?? 1;
  if (!Number.isInteger(stripComponents) || stripComponents < 0) {
    throw new RangeError(`stripComponents must be a non-negative integer, got ${stripComponents}`);
  }
  let extract: typeof extractFn;
  try {
    extract = await tarExtractor();
  } catch (err) {
    destroySource(archive); // a broken install: the source is not left open behind the error
    throw err;
  }
  let root: string;
  try {
    root = await prepareTarget(targetDir);
  } catch (err) {
    destroySource(archive);
    return { files: 0, bytes: 0, refusals: [`target unusable: ${codeOf(err)}`], truncated: true };
  }
  if (options.signal?.aborted === true) {
    destroySource(archive);
    return { files: 0, bytes: 0, refusals: ['aborted'], truncated: true };
  }
  const extraction = new Extraction(
    extract(),
    archive,
    root,
    limits,
    stripComponents,
    options.transform,
    options.tempDir ?? dirname(root),
    options.redactName,
  );
  const onAbort = (): void => extraction.stop('aborted');
  options.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    const fed = extraction.feed();
    await extraction.run();
    // After a stop the source was destroyed; feeding ends without waiting for it.
    if (!extraction.stopped) await fed;
    else void fed;
  } finally {
    options.signal?.removeEventListener('abort', onAbort);
  }
  return extraction.report();
}
