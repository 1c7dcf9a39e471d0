import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { join, posix } from 'node:path';
import { PassThrough, type Readable, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { extract, pack, type Pack } from 'tar-stream';
import { planEntry, sanitizeLabel, type Plan } from './archive-entry-plan.js';
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
  /**
   * The checked copy could not be written whole on the server's disk: the error's code (`ENOSPC`, `EIO`…; `error`
   * without one), null when it was. The server's fault, not the archive's: nothing of it may reach the container.
   */
  readonly unwritten: string | null;
  /** Names (relative to the destination) the archive writes as files or links: none may replace a directory. */
  readonly nonDirectories: readonly string[];
  dispose(): Promise<void>;
}

/** The error an upload whose checked copy could not be written is answered with (507 for a full disk, else 500). */
export class UnwrittenCopyError extends Error {
  readonly code: string;
  constructor(code: string) {
    super(`the checked copy of the upload could not be written on the server's disk (${code})`);
    this.name = 'UnwrittenCopyError';
    this.code = code;
  }
}

const FRAMING_BYTES_PER_ENTRY = 4096;

/**
 * Copies `body` into `limited` until it ends, passes `budget` bytes, or the check (`checked`) is over; never
 * destroys `body` (a request's destruction is its connection's: the error answer would never reach the client).
 * - Past the budget, or once the check is over with a refusal (bytes that are no tar stop the parser at once): the
 *   reading stops and the rest is left unread; the error answer says `Connection: close` and reads and drops it
 *   (http-kit `sendError`). Waiting instead for the parser to take more would wait for ever: it is gone.
 * - The check over without a refusal before the body ended (not with tar-stream, which reads to the end): the rest
 *   is read and dropped, within the budget, so that the answer and the connection can go on.
 */
function feedWithin(
  body: Readable,
  limited: PassThrough,
  budget: number,
  refusals: string[],
  checked: Promise<void>,
): Promise<void> {
  return new Promise<void>((resolve) => {
    let fed = 0;
    let over = false;
    let dropping = false;
    const finish = (refusal: string | null): void => {
      if (over) return;
      over = true;
      body.off('data', onData);
      body.off('end', onEnd);
      body.off('close', onClose); // onError stays: an error after this (a reset while the rest is dropped) is no crash
      limited.off('drain', onDrain);
      body.pause();
      if (refusal !== null) refusals.push(refusal);
      limited.end();
      resolve();
    };
    const onData = (chunk: Buffer): void => {
      fed += chunk.length;
      if (fed > budget) return finish('archive size limit reached');
      if (dropping) return;
      if (!limited.write(chunk)) body.pause();
    };
    const onDrain = (): void => {
      if (!over) body.resume();
    };
    const onEnd = (): void => finish(null);
    const onError = (): void => finish('request body ended early');
    // A request whose connection closed before its end: no 'end' comes (and no 'error' on every Node).
    const onClose = (): void => finish(body.readableEnded ? null : 'request body ended early');
    body.on('data', onData);
    body.once('end', onEnd);
    body.on('error', onError);
    body.once('close', onClose);
    limited.on('drain', onDrain);
    // A request already ended or gone (its client left while the route asked the engine): no event will come.
    if (body.readableEnded) finish(null);
    else if (body.destroyed || body.closed) finish('request body ended early');
    void checked.then(() => {
      if (over) return;
      if (refusals.length > 0) {
        finish(null);
        return;
      }
      // A guard: tar-stream reads its input to the end (past the end-of-archive blocks), so a check over without a
      // refusal comes after the body ended; a parser that stopped at the end-of-archive would leave bytes here.
      dropping = true;
      limited.off('drain', onDrain);
      body.resume();
    });
  });
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

/** The longest name of one path component, and of a whole entry's path, Linux takes (NAME_MAX; PATH_MAX less room). */
const MAX_NAME_BYTES = 255;
const MAX_PATH_BYTES = 3072;

interface ShapeNode {
  kind: 'file' | 'directory';
  readonly children: Map<string, ShapeNode>;
}

/**
 * The tree an upload's entries make, so that what the container's tar would refuse half-way (a name too long for
 * Linux; a file where the archive has a directory, or a path under one of its files) is refused before anything is
 * written (issue 39: each left the entries before it in the container, and a 100,000-byte name came back as a 500). A
 * trie by path component: each entry costs the length of its name, however deep.
 */
class ArchiveShape {
  readonly #root: ShapeNode = { kind: 'directory', children: new Map() };

  /** The refusal of an entry (a file or link: 'file'), or null, and then it is recorded. */
  check(segments: readonly string[], kind: 'file' | 'directory', label: string): string | null {
    let length = 0;
    for (const segment of segments) {
      const bytes = Buffer.byteLength(segment);
      if (bytes > MAX_NAME_BYTES)
        return `name component longer than ${MAX_NAME_BYTES} bytes refused: ${label}`;
      length += bytes + 1;
    }
    if (length - 1 > MAX_PATH_BYTES) return `path longer than ${MAX_PATH_BYTES} bytes refused: ${label}`;
    let node = this.#root;
    for (const segment of segments.slice(0, -1)) {
      const child = node.children.get(segment);
      if (child?.kind === 'file') return `path under a file of the archive refused: ${label}`;
      node = child ?? this.#add(node, segment, 'directory');
    }
    const last = segments[segments.length - 1] ?? '';
    const known = node.children.get(last);
    if (known !== undefined && known.kind !== kind)
      return `${kind} where the archive has a ${known.kind} refused: ${label}`;
    if (known === undefined) this.#add(node, last, kind);
    return null;
  }

  #add(parent: ShapeNode, segment: string, kind: ShapeNode['kind']): ShapeNode {
    const node: ShapeNode = { kind, children: new Map() };
    parent.children.set(segment, node);
    return node;
  }
}

/** Why an entry is refused from its name and the entries before it (`tooMany`: past the entry count), or null. */
function entryRefusal(
  name: string,
  plan: Plan,
  tooMany: boolean,
  links: ReadonlyMap<string, string>,
  shape: ArchiveShape,
): string | null {
  if ((plan.kind === 'file' || plan.kind === 'directory') && throughLink(plan.segments, links))
    return `path through a symlink of the archive refused: ${sanitizeLabel(name)}`;
  if (plan.kind !== 'refuse' && name.includes('\n'))
    return `name with a newline refused: ${sanitizeLabel(name)}`;
  if (plan.kind === 'refuse') return plan.reason;
  if (tooMany) return 'too many entries';
  return plan.kind === 'skip' ? null : shape.check(plan.segments, plan.kind, sanitizeLabel(name));
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
  /** The archive's symbolic links (name: target), for the paths that would go through one. */
  const links = new Map<string, string>();
  const shape = new ArchiveShape();
  input.pipe(parser);
  try {
    for await (const entry of parser) {
      // Enough to say what is wrong; the rest is not read (a refusal a header long, by the million, would build an
      // answer longer than a string can be).
      if (refusals.length >= MAX_REFUSALS) {
        refusals.push(`more refused: the check stopped after the first ${MAX_REFUSALS} refusals`);
        break;
      }
      const header = entry.header;
      entries += 1;
      const plan = planEntry(header.type === 'symlink' ? { name: header.name, type: 'file' } : header, 0);
      const refusal = entryRefusal(header.name, plan, entries > 2 * limits.maxFiles, links, shape);
      if (refusal !== null) refusals.push(refusal);
      else if (header.type === 'symlink' && plan.kind === 'file') {
        const name = plan.segments.join('/');
        const refusal = linkRefusal(name, header.linkname ?? '');
        if (refusal === null) links.set(name, header.linkname ?? '');
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
    refusals.push(...linksThroughLinks(links).slice(0, Math.max(0, MAX_REFUSALS - refusals.length)));
  } catch (err) {
    refusals.push(`not a valid tar archive (${(err as Error).message.slice(0, 80)})`);
  }
}

/** Refusals listed at most; the check stops at the next entry. */
const MAX_REFUSALS = 100;

/** Every link checked against every other (one declared later included): none may lead through another. */
function linksThroughLinks(links: ReadonlyMap<string, string>): string[] {
  return [...links]
    .filter(([name, target]) => targetThroughLink(name, target, links))
    .map(([name]) => `symlink through another symlink of the archive refused: ${sanitizeLabel(name)}`);
}

/** Whether a folder on the way to `segments` (not the entry itself) is a symbolic link of the archive. */
function throughLink(segments: readonly string[], links: ReadonlyMap<string, string>): boolean {
  for (let i = 1; i < segments.length; i += 1) if (links.has(segments.slice(0, i).join('/'))) return true;
  return false;
}

/**
 * Whether the link `name -> target`, followed from its own folder, steps through another link of the archive before
 * its last step: its text alone (linkRefusal) would then not say where it leads (`sub/q -> ..` makes `sub/q/..` the
 * folder above the destination, not `sub`). A link whose last step is a link is fine: each was checked on its own.
 */
function targetThroughLink(name: string, target: string, links: ReadonlyMap<string, string>): boolean {
  const folder = posix.dirname(name);
  const stack = folder === '.' ? [] : folder.split('/');
  const parts = target.split('/').filter((part) => part !== '' && part !== '.');
  for (const [i, part] of parts.entries()) {
    if (part === '..') {
      stack.pop();
      continue;
    }
    stack.push(part);
    if (i < parts.length - 1 && links.has(stack.join('/'))) return true;
  }
  return false;
}

export async function checkUpload(
  body: Readable,
  tempRoot: string,
  limits: ExtractLimits = DEFAULT_EXTRACT_LIMITS,
  openCopy: (path: string) => Writable = (path) => createWriteStream(path, { mode: 0o600 }),
): Promise<CheckedUpload> {
  const dir = await mkdtemp(join(tempRoot, 'upload-'));
  const path = join(dir, 'checked.tar');
  const refusals: string[] = [];
  const count: RepackCount = { files: 0, bytes: 0, nonDirectories: [] };
  const out = pack();
  // A copy that cannot be written whole (a full disk) never reaches the container: all of it or nothing. Said by its
  // code alone: the error's message may name the temporary file, a path of the host's.
  const written = pipeline(out, openCopy(path)).then(
    () => null,
    (err: unknown) => {
      const code = (err as { code?: unknown } | null)?.code;
      return typeof code === 'string' && /^[A-Z0-9_]{1,32}$/.test(code) ? code : 'error';
    },
  );
  const budget = limits.maxTotalBytes + (2 * limits.maxFiles + 2) * FRAMING_BYTES_PER_ENTRY;
  const limited = new PassThrough();
  const repacked = repackChecked(limited, out, limits, refusals, count);
  await Promise.all([feedWithin(body, limited, budget, refusals, repacked), repacked]);
  out.finalize();
  const unwritten = await written;
  return {
    path,
    files: count.files,
    bytes: count.bytes,
    refusals,
    unwritten,
    nonDirectories: count.nonDirectories,
    dispose: () => rm(dir, { recursive: true, force: true }),
  };
}

/** The checked upload as a stream for the engine. */
export function openChecked(upload: CheckedUpload): Readable {
  return createReadStream(upload.path);
}
