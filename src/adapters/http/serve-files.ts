import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { join, posix } from 'node:path';
import { PassThrough, Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { extract, pack, type Header } from 'tar-stream';
import { ApiError } from '../../app/serve/api-error.js';
import { redactText } from '../../core/redaction/redact-text.js';
import { DEFAULT_EXTRACT_LIMITS, type ExtractLimits } from '../safe-extract.js';
import { ToolError } from '../../core/errors.js';
import { errnoOf } from '../../core/pause-cause.js';
import { run, keepText, fileError, headOf, check, type FileTarget } from './serve-files-exec.js';

/**
 * File I/O of a session as a user (issue 23): every read and write runs INSIDE the container, as the requested
 * user (else the container's default user), with the container's own `sh`, `tar`, `cat`. The engine's archive API
 * always runs as root and would ignore permissions (and leave uploads owned by root); running as the user lets the
 * container's kernel decide, exactly as an exec by that user would, and new files belong to that user. Nothing the
 * container sends is ever extracted on the host: a download is re-packed entry by entry (files redacted through a
 * temporary file, links carried as links), so no link can be followed on this side.
 */

// Every path handed to these scripts is absolute (starts with '/'), so none can be taken for an option.
const PREPARE_DIR = [
  'd=$1',
  'if [ -e "$d" ] && [ ! -d "$d" ]; then echo "$d: Not a directory" >&2; exit 1; fi',
  'mkdir -p "$d" || exit 1',
  'cd "$d" || exit 1',
  'if [ ! -w . ]; then echo "$d: Permission denied" >&2; exit 1; fi',
  // The names the upload writes as non-directories: none may be an existing directory (never replaced).
  'while IFS= read -r n; do if [ -d "$n" ] && [ ! -L "$n" ]; then echo "$d/$n: Is a directory" >&2; exit 1; fi; done',
].join('\n');

const EXTRACT = 'cd "$1" && exec tar -x -o -f -';

/**
 * Unpacks a checked tar (see serve-archive `checkUpload`) into `target.path` as the user: the folder is made if
 * needed; refused before anything is written when the folder is not one, not writable, or a file of the upload
 * would replace an existing directory. Modes come from the archive (less the container's umask), owner: the user.
 */
export async function uploadTar(
  target: FileTarget,
  tar: () => Readable,
  nonDirectories: readonly string[],
): Promise<void> {
  const names = new PassThrough();
  names.end(nonDirectories.map((n) => `${n}\n`).join(''));
  await check(target, PREPARE_DIR, [target.path], names);
  await check(target, EXTRACT, [target.path], tar());
}

const PACK = [
  'p=$1',
  'if [ ! -e "$p" ] && [ ! -L "$p" ]; then ls -d "$p" >&2 || echo "$p: No such file or directory" >&2; exit 1; fi',
  'if [ "$p" = / ]; then exec tar -c -f - -C / .; fi',
  'cd "$(dirname "$p")" && exec tar -c -f - "./$(basename "$p")"',
].join('\n');

export interface SpooledDownload {
  readonly path: string;
  readonly files: number;
  readonly refusals: readonly string[];
  dispose(): Promise<void>;
}

/** A name from the container's tar, relative and normalized ('' for the top `.`). */
function cleanName(name: string): string {
  return posix
    .normalize(name.replace(/^\/+/, ''))
    .replace(/^(\.\/)+/, '')
    .replace(/\/+$/, '')
    .replace(/^\.$/, '');
}

/** An absolute name or one with a `..` component: never handed to a client (a forged tar could hold one). */
function unsafeName(name: string): boolean {
  return name.startsWith('/') || name.split('/').includes('..');
}

interface RepackState {
  entries: number;
  files: number;
  bytes: number;
  readonly refusals: string[];
}

/** One entry of the container's tar into `out`: files redacted (sized through a temp file), dirs and links as they are. */
async function repackEntry(
  entry: AsyncIterable<unknown> & { resume(): unknown },
  header: Header,
  out: ReturnType<typeof pack>,
  dir: string,
  ctx: { secrets: readonly string[]; redactor: () => Transform; limits: ExtractLimits; state: RepackState },
): Promise<void> {
  const { state, limits } = ctx;
  // Every header counts (a forged tar of endless links, directories or special files must stop too), and so do its
  // name and link target, against the same limits as files' data.
  state.entries += 1;
  state.bytes += Buffer.byteLength(header.name) + Buffer.byteLength(header.linkname ?? '');
  const name = redactText(cleanName(header.name), ctx.secrets);
  const isFile = header.type === 'file' || header.type === 'contiguous-file';
  if (
    state.entries > limits.maxFiles ||
    (isFile && (header.size ?? 0) > limits.maxFileBytes) ||
    state.bytes + (isFile ? (header.size ?? 0) : 0) > limits.maxTotalBytes
  ) {
    state.refusals.push(`limit reached at ${name}`);
    throw new ToolError('E_LIMIT_EXCEEDED', 'download limit reached');
  }
  if (unsafeName(header.name) || (header.type === 'link' && unsafeName(header.linkname ?? ''))) {
    entry.resume();
    state.refusals.push(`unsafe name refused: ${name}`);
    return;
  }
  const mode = (header.mode ?? 0o644) & 0o777;
  const mtime = header.mtime ?? new Date();
  if (isFile) {
    state.files += 1;
    const temp = join(dir, 'entry');
    await pipeline(entry, ctx.redactor(), createWriteStream(temp, { mode: 0o600 }));
    const size = (await stat(temp)).size;
    state.bytes += size;
    await pipeline(createReadStream(temp), out.entry({ name, size, mode, mtime, type: 'file' }));
    await rm(temp, { force: true });
    return;
  }
  entry.resume();
  if (name === '') return;
  if (header.type === 'directory') out.entry({ name, mode, mtime, type: 'directory' });
  else if (header.type === 'symlink' || header.type === 'link') {
    const linkname = header.type === 'link' ? cleanName(header.linkname ?? '') : (header.linkname ?? '');
    out.entry({ name, mode, mtime, type: header.type, linkname: redactText(linkname, ctx.secrets) });
  } else state.refusals.push(`${header.type} refused: ${name}`);
}

/**
 * `target.path` (a file, directory or link) as a tar, made in the container by the user, then re-packed into a
 * temporary file on the host with every file redacted: names relative to the path's parent (as the engine's
 * archive API gives them), modes (0777 bits) and symbolic links kept. Special files are refused (counted).
 */
export async function downloadTar(
  target: FileTarget,
  tempRoot: string,
  redactor: () => Transform,
  signal?: AbortSignal,
  limits: ExtractLimits = DEFAULT_EXTRACT_LIMITS,
): Promise<SpooledDownload> {
  const dir = await mkdtemp(join(tempRoot, 'download-'));
  const dispose = (): Promise<void> => rm(dir, { recursive: true, force: true });
  const state: RepackState = { entries: 0, files: 0, bytes: 0, refusals: [] };
  const tarPath = join(dir, 'out.tar');
  try {
    const handle = await run(target, PACK, [target.path]);
    const stopOnAbort = (): void => void handle.killTree().catch(() => undefined);
    signal?.addEventListener('abort', stopOnAbort, { once: true });
    const out = pack();
    const written = pipeline(out, createWriteStream(tarPath, { mode: 0o600 }));
    // Awaited below; a copy that fails first (its disk full) is not an unhandled rejection meanwhile (that would end
    // the whole server), and its error is the one to answer: the packer is gone, the next entry only says so.
    let copyError: unknown = null;
    written.catch((err: unknown) => {
      copyError = err;
    });
    const parser = extract();
    const head = headOf(handle.stdout);
    head.stream.pipe(parser);
    const stderr = keepText(handle.stderr);
    let failure: unknown = null;
    try {
      for await (const entry of parser) {
        await repackEntry(entry, entry.header, out, dir, {
          secrets: target.secrets,
          redactor,
          limits,
          state,
        });
      }
    } catch (err) {
      failure = err;
      await handle.killTree().catch(() => undefined);
      // Drained to its end, or the exec's stream never ends (the tar's output backs up behind the parser that is gone)
      // and neither does the request: its transfer slot and spool folder held until the server stops.
      head.stream.unpipe(parser);
      head.stream.resume();
      handle.stdout.resume();
    } finally {
      signal?.removeEventListener('abort', stopOnAbort);
    }
    if (failure === null) {
      out.finalize();
      await written;
    } else {
      // A failed download's spool is dropped, not finished: nothing of it is sent.
      out.destroy();
      await written.catch(() => undefined);
    }
    const [code, text] = await Promise.all([handle.done, stderr]);
    if (signal?.aborted === true) throw new ApiError(400, 'E_REQUEST_INVALID', 'the client went away');
    if (state.refusals.some((r) => r.startsWith('limit reached'))) {
      throw new ApiError(
        413,
        'E_ARCHIVE_TOO_LARGE',
        `${redactText(target.path, target.secrets)}: more than the download limits (${limits.maxFiles} entries, ${limits.maxFileBytes} bytes a file, ${limits.maxTotalBytes} bytes in all, names and link targets included)`,
      );
    }
    // A write of our own failed: the container's tar was stopped by us, its exit says nothing of the path.
    const ours = ownWriteError(copyError, failure);
    if (ours !== undefined) throw ours;
    // Its output is named only when it is text (the engine's own words on a failed exec), never tar bytes.
    if (code !== 0) throw fileError(`${text}\n${textOnly(head.text())}`, target);
    if (failure !== null)
      throw fileError(`not a valid tar from the container: ${(failure as Error).message}`, target);
    return { path: tarPath, files: state.files, refusals: state.refusals, dispose };
  } catch (err) {
    await dispose();
    throw err;
  }
}

/**
 * A write of our own that failed (the spool's disk full: ENOSPC, answered 507 by its code alone, toApiError) among
 * the errors met; undefined when none is one.
 */
function ownWriteError(...errors: unknown[]): Error | undefined {
  return errors.find((err): err is Error => err instanceof Error && errnoOf(err) !== null);
}

/** Output kept for an error's words only when it is text: a NUL says it is a file's or a tar's bytes. */
function textOnly(output: string): string {
  return output.includes('\0') ? '' : output;
}

const READ_FILE = [
  'p=$1',
  'if [ -d "$p" ]; then echo "$p: Is a directory" >&2; exit 1; fi',
  'exec cat "$p"',
].join('\n');

/** One file's bytes, read by the user and redacted, spooled to a temporary file (limit: `maxBytes`, else 413). */
export async function readOneFile(
  target: FileTarget,
  tempRoot: string,
  redactor: () => Transform,
  maxBytes: number,
): Promise<SpooledDownload & { bytes: number }> {
  const dir = await mkdtemp(join(tempRoot, 'file-'));
  const dispose = (): Promise<void> => rm(dir, { recursive: true, force: true });
  const path = join(dir, 'file');
  try {
    const handle = await run(target, READ_FILE, [target.path]);
    const head = headOf(handle.stdout);
    let bytes = 0;
    let tooLarge = false;
    const limit = async function* (source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
      for await (const chunk of source) {
        bytes += chunk.length;
        if (bytes > maxBytes) {
          tooLarge = true;
          await handle.killTree().catch(() => undefined);
          // Drained to its end: the spool's pipeline ends here and no longer reads it, and the exec's stream (so its
          // `done`) would wait for room for ever.
          handle.stdout.unpipe();
          handle.stdout.resume();
          return;
        }
        yield chunk;
      }
    };
    // The spool's own write failing (its disk full) stops the reader in the container too, before the error goes on.
    const spooled = pipeline(head.stream, limit, redactor(), createWriteStream(path, { mode: 0o600 })).catch(
      async (err: unknown) => {
        await handle.killTree().catch(() => undefined);
        handle.stdout.resume();
        throw err;
      },
    );
    const [, stderr, code] = await Promise.all([spooled, keepText(handle.stderr), handle.done]);
    handle.stdout.resume();
    if (tooLarge)
      throw new ApiError(
        413,
        'E_FILE_TOO_LARGE',
        `${redactText(target.path, target.secrets)}: larger than ${maxBytes} bytes; download it with GET …/archive`,
      );
    if (code !== 0) throw fileError(`${stderr}\n${textOnly(head.text())}`, target);
    return { path, files: 1, refusals: [], bytes: (await stat(path)).size, dispose };
  } catch (err) {
    await dispose();
    throw err;
  }
}

const WRITE_FILE = [
  'p=$1',
  'm=$2',
  'if [ -d "$p" ]; then echo "$p: Is a directory" >&2; exit 1; fi',
  'mkdir -p "$(dirname "$p")" || exit 1',
  'cat > "$p" || exit 1',
  'if [ -n "$m" ]; then chmod "$m" "$p" || exit 1; fi',
].join('\n');

/**
 * The request body (streamed, never held whole) into one file, written by the user: parent folders made, an
 * existing directory never replaced (409 E_IS_A_DIRECTORY), `mode` (octal) applied when given.
 */
export async function writeOneFile(
  target: FileTarget,
  body: Readable,
  mode: string | undefined,
): Promise<{ bytes: number }> {
  let bytes = 0;
  const counted = new Transform({
    transform(chunk: Buffer, _encoding, done): void {
      bytes += chunk.length;
      done(null, chunk);
    },
  });
  // A body that fails (its client gone, or silent too long: idle-body.ts) ends the writer's stdin; piped alone, the
  // writer would wait for the rest for ever. Ended, not destroyed: the writer may not be reading yet (the engine is
  // still making its exec), and an error nobody listens for would end the server. The route says what went wrong.
  body.once('error', () => {
    body.unpipe(counted);
    counted.end();
  });
  body.pipe(counted);
  await check(target, WRITE_FILE, [target.path, mode ?? ''], counted);
  return { bytes };
}
