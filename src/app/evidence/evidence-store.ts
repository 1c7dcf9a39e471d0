import { randomBytes } from 'node:crypto';
import { basename, dirname, isAbsolute, join } from 'node:path';
import { ExitCode, RoboguideError } from '../../core/errors.js';
import { failpoint } from '../failpoints.js';
import { errnoOf } from '../ports/file-system.js';
import type { FileHandle, FileSystem } from '../ports/file-system.js';
import { LogSink } from './log-sink.js';
import type { JournalEvent, JournalRecord } from '../../core/journal-events.js';

export const FILE_PERMISSIONS = 0o600;
export const DIR_PERMISSIONS = 0o700;
export const JOURNAL_FILE = 'events.jsonl';

/** `.<name>.tmp-<pid>-<16 hex>`: the only names cleanTempFiles ever removes. */
const TEMP_NAME = /^\..+\.tmp-\d+-[0-9a-f]{16}$/;

/**
 * Folders whose names a pair chooses (collected session files, the pair's private outcome folder): we never
 * write temp files there, so cleanTempFiles never looks inside — a pair's file named like one of our temps stays.
 */
const PAIR_FOLDERS: ReadonlySet<string> = new Set(['sessions', 'outcome']);

/**
 * What a caller appends: one of the closed union of journal events (`core/journal-events.ts`), its `at` from the
 * injected clock. The store adds `seq`. What it reads back is a `JournalRecord`: the same union, each field to be
 * checked (an older writer may lack it), or a foreign type (an older or newer writer) that readers pass over.
 */
export type { JournalEvent, JournalRecord } from '../../core/journal-events.js';

/** Complete records and the byte offset just past the last of them (a torn last line is not counted). */
export interface JournalSlice {
  readonly records: JournalRecord[];
  readonly endBytes: number;
}

/** Told of every record this store appends, in journal order, once it is durable. */
export type JournalListener = (record: JournalEvent & { readonly seq: number }, endBytes: number) => void;

interface JournalState {
  lastSeq: number;
  sizeBytes: number;
  /** The last record is complete but has no trailing newline (crash between the two). */
  needsNewline: boolean;
}

interface ParsedJournal {
  readonly records: JournalRecord[];
  /** Bytes up to the end of the last complete record. */
  readonly goodBytes: number;
  readonly needsNewline: boolean;
}

function storeError(message: string, rel: string, syscall: string, cause?: unknown): RoboguideError {
  const errno = errnoOf(cause);
  return new RoboguideError('E_STORE', `${message}: ${rel}${errno === undefined ? '' : ` (${errno})`}`, {
    ...(cause === undefined ? {} : { cause }),
    context: { path: rel, syscall, ...(errno === undefined ? {} : { errno }) },
  });
}

/** Runs one port call; any failure becomes E_STORE naming the relative path and the syscall. */
async function attempt<T>(syscall: string, rel: string, message: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof RoboguideError) throw err;
    throw storeError(message, rel, syscall, err);
  }
}

async function ignoreFailure(call: () => Promise<unknown>): Promise<void> {
  try {
    await call();
  } catch {
    // Best effort: the primary failure is what the caller reports.
  }
}

async function writeAll(handle: FileHandle, bytes: Uint8Array): Promise<void> {
  for (let offset = 0; offset < bytes.byteLength;) {
    const written = await handle.write(bytes.subarray(offset));
    if (written <= 0) throw Object.assign(new Error('write(2) wrote no bytes'), { code: 'EIO' });
    offset += written;
  }
}

function serialize(rel: string, value: unknown, indent?: number): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value, null, indent);
  } catch (err) {
    throw storeError('value is not JSON-serializable', rel, 'serialize', err);
  }
  if (text === undefined) throw storeError('value is not JSON-serializable', rel, 'serialize');
  return text;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

function parseRecord(bytes: Uint8Array, previousSeq: number): JournalRecord | undefined {
  try {
    const value: unknown = JSON.parse(utf8.decode(bytes));
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
    const record = value as Record<string, unknown>;
    const { seq, type, at } = record;
    if (typeof seq !== 'number' || !Number.isInteger(seq) || seq <= previousSeq) return undefined;
    if (typeof type !== 'string' || typeof at !== 'string') return undefined;
    return record as JournalRecord;
  } catch {
    return undefined;
  }
}

/**
 * A torn last line (no newline, not a complete record: a crash mid-append) is ignored; a last
 * record complete but without its newline counts. Anything else malformed is corruption.
 */
function parseJournal(bytes: Uint8Array): ParsedJournal {
  const records: JournalRecord[] = [];
  let start = 0;
  while (start < bytes.byteLength) {
    const newline = bytes.indexOf(0x0a, start);
    const end = newline === -1 ? bytes.byteLength : newline;
    const record = parseRecord(bytes.subarray(start, end), records.at(-1)?.seq ?? 0);
    if (record === undefined && newline === -1) return { records, goodBytes: start, needsNewline: false };
    if (record === undefined)
      throw storeError(`corrupt journal record at line ${records.length + 1}`, JOURNAL_FILE, 'parse');
    records.push(record);
    if (newline === -1) return { records, goodBytes: bytes.byteLength, needsNewline: true };
    start = newline + 1;
  }
  return { records, goodBytes: start, needsNewline: false };
}

function checkRelative(rel: string): string[] {
  if (rel === '' || rel === '.') return [];
  const segments = rel.split('/');
  if (isAbsolute(rel) || segments.some((s) => s === '' || s === '.' || s === '..')) {
    throw storeError('path must be relative and stay inside the output directory', rel, 'resolve');
  }
  return segments;
}

/**
 * The batch output directory D (SPEC §4): atomic JSON replace, exclusive publish of claims, the
 * fsynced append-only journal and log files. Every failure is RoboguideError('E_STORE') with the
 * relative path, the syscall and the errno code in context, the original error as cause.
 * One process appends to the journal at a time (the supervisor); appends within it are serialized.
 */
export class EvidenceStore {
  readonly #fs: FileSystem;
  readonly #root: string;
  #journal: JournalState | undefined;
  #journalChain: Promise<unknown> = Promise.resolve();
  readonly #ownTemps = new Set<string>();
  readonly #journalListeners = new Set<JournalListener>();

  constructor(fs: FileSystem, root: string) {
    if (!isAbsolute(root)) throw storeError('output directory must be an absolute path', root, 'resolve');
    this.#fs = fs;
    this.#root = root;
  }

  /** D must not exist (it is created 0700) or be an empty directory (made 0700); else exit 2. */
  static async createOutputDir(fs: FileSystem, root: string): Promise<void> {
    if (!isAbsolute(root)) throw storeError('output directory must be an absolute path', root, 'resolve');
    const info = await attempt('lstat', root, 'cannot inspect output directory', async () => {
      try {
        return await fs.lstat(root);
      } catch (err) {
        if (errnoOf(err) === 'ENOENT') return undefined;
        throw err;
      }
    });
    if (info === undefined) {
      await attempt('mkdir', root, 'cannot create output directory', () => fs.mkdir(root, DIR_PERMISSIONS));
      await attempt('fsync', dirname(root), 'cannot fsync parent directory', () => fs.syncDir(dirname(root)));
      return;
    }
    const entries =
      info.kind === 'directory'
        ? await attempt('readdir', root, 'cannot list output directory', () => fs.readdir(root))
        : [];
    if (info.kind !== 'directory' || entries.length > 0) {
      throw new RoboguideError('E_OUTPUT_NOT_EMPTY', `output ${root} exists and is not an empty directory`, {
        exitCode: ExitCode.invalidInput,
        context: { path: root, kind: info.kind, entries: entries.slice(0, 5).map((e) => e.name) },
        suggestions: [
          'choose a new --output directory',
          'to continue this batch: e1-batch resume --output ' + root,
        ],
      });
    }
    if (info.permissions !== DIR_PERMISSIONS) {
      await attempt('chmod', root, 'cannot make output directory private', () =>
        fs.chmod(root, DIR_PERMISSIONS),
      );
    }
  }

  get root(): string {
    return this.#root;
  }

  /** Absolute path of a relative one, checked to stay inside D. */
  resolve(rel: string): string {
    return join(this.#root, ...checkRelative(rel));
  }

  async writeJsonAtomic(rel: string, value: unknown): Promise<void> {
    await this.writeBytesAtomic(rel, new TextEncoder().encode(`${serialize(rel, value, 2)}\n`));
  }

  /** Temp file in the same directory, write, fsync, rename over `rel`, fsync the directory; 0600. */
  async writeBytesAtomic(rel: string, bytes: Uint8Array): Promise<void> {
    const target = this.resolve(rel);
    const temp = await this.#writeTemp(rel, target, bytes);
    failpoint(`write:${basename(target)}:temp_written`);
    try {
      await attempt('rename', rel, 'cannot replace file', () => this.#fs.rename(temp, target));
    } catch (err) {
      await this.#discardTemp(temp);
      throw err;
    }
    this.#ownTemps.delete(temp);
    failpoint(`write:${basename(target)}:renamed`);
    await this.#syncParent(rel);
  }

  /** The claim primitive: link(2) of a fsynced temp file; never replaces an existing `rel`. */
  async publishExclusive(rel: string, value: unknown): Promise<'published' | 'exists'> {
    const target = this.resolve(rel);
    const temp = await this.#writeTemp(
      rel,
      target,
      new TextEncoder().encode(`${serialize(rel, value, 2)}\n`),
    );
    failpoint(`publish:${basename(target)}:temp_written`);
    try {
      await this.#fs.link(temp, target);
      failpoint(`publish:${basename(target)}:linked`);
    } catch (err) {
      if (errnoOf(err) === 'EEXIST') return 'exists';
      throw storeError('cannot publish file', rel, 'link', err);
    } finally {
      await this.#discardTemp(temp);
    }
    await this.#syncParent(rel);
    return 'published';
  }

  /** Null when `rel` does not exist; E_STORE when it is not valid JSON. */
  async readJson<T = unknown>(rel: string): Promise<T | null> {
    const path = this.resolve(rel);
    const bytes = await attempt('read', rel, 'cannot read file', async () => {
      try {
        return await this.#fs.readFile(path);
      } catch (err) {
        if (errnoOf(err) === 'ENOENT') return null;
        throw err;
      }
    });
    if (bytes === null) return null;
    try {
      return JSON.parse(utf8.decode(bytes)) as T;
    } catch (err) {
      throw storeError('corrupt JSON file', rel, 'parse', err);
    }
  }

  /** The bytes of `rel`; null when it does not exist (a symlink is never followed). */
  async readBytes(rel: string): Promise<Uint8Array | null> {
    const path = this.resolve(rel);
    try {
      return await this.#fs.readFile(path);
    } catch (err) {
      if (errnoOf(err) === 'ENOENT') return null;
      throw err;
    }
  }

  async exists(rel: string): Promise<boolean> {
    const path = this.resolve(rel);
    return attempt('lstat', rel, 'cannot inspect path', async () => {
      try {
        await this.#fs.lstat(path);
        return true;
      } catch (err) {
        if (errnoOf(err) === 'ENOENT') return false;
        throw err;
      }
    });
  }

  /** `exists` for many paths at once (in order); one E_STORE for the first that cannot be inspected. */
  async existAll(rels: readonly string[]): Promise<boolean[]> {
    const paths = rels.map((rel) => this.resolve(rel));
    if (this.#fs.existMany) {
      const many = this.#fs.existMany.bind(this.#fs);
      return attempt('lstat', rels[0] ?? '.', 'cannot inspect path', () => many(paths));
    }
    return Promise.all(rels.map((rel) => this.exists(rel)));
  }

  /** Sorted entry names of a directory (temp files left out); empty when it does not exist. */
  async list(relDir: string): Promise<string[]> {
    const path = this.resolve(relDir);
    const entries = await attempt('readdir', relDir, 'cannot list directory', async () => {
      try {
        return await this.#fs.readdir(path);
      } catch (err) {
        if (errnoOf(err) === 'ENOENT') return [];
        throw err;
      }
    });
    return entries
      .map((e) => e.name)
      .filter((name) => !TEMP_NAME.test(name))
      .sort();
  }

  /** Creates each missing directory of `rel` with 0700 and fsyncs its parent; idempotent. */
  async ensureDir(rel: string): Promise<void> {
    const segments = checkRelative(rel);
    for (let depth = 1; depth <= segments.length; depth += 1) {
      const relDir = segments.slice(0, depth).join('/');
      const path = join(this.#root, ...segments.slice(0, depth));
      const created = await attempt('mkdir', relDir, 'cannot create directory', async () => {
        try {
          await this.#fs.mkdir(path, DIR_PERMISSIONS);
          return true;
        } catch (err) {
          if (errnoOf(err) !== 'EEXIST') throw err;
          if ((await this.#fs.lstat(path)).kind !== 'directory') throw err;
          return false;
        }
      });
      if (created) await this.#syncParent(relDir);
    }
  }

  /** One JSON line in `events.jsonl` (O_APPEND, fsync per record); returns the record's `seq`. */
  appendJournal(event: JournalEvent): Promise<number> {
    const run = this.#journalChain.then(() => this.#appendNow(event));
    this.#journalChain = run.catch(() => undefined);
    return run;
  }

  /** Every complete record, after the appends already requested; a torn last line is ignored. */
  async readJournal(): Promise<JournalRecord[]> {
    await this.#journalChain;
    const bytes = await this.#readJournalBytes();
    return bytes === null ? [] : parseJournal(bytes).records;
  }

  /** Like readJournal, with the offset just past the last complete record. */
  async readJournalSlice(): Promise<JournalSlice> {
    await this.#journalChain;
    const bytes = await this.#readJournalBytes();
    if (bytes === null) return { records: [], endBytes: 0 };
    const parsed = parseJournal(bytes);
    return { records: parsed.records, endBytes: parsed.goodBytes };
  }

  /**
   * The complete records from byte `offset` on (an offset some earlier read or append ended at), and where they end.
   * Null when the journal is shorter than `offset` or `offset` is not at the start of a line: the caller reads it
   * all instead.
   */
  async readJournalFrom(offset: number): Promise<JournalSlice | null> {
    const path = this.resolve(JOURNAL_FILE);
    const from = Math.max(0, offset - 1);
    const bytes = await attempt('read', JOURNAL_FILE, 'cannot read journal', async () => {
      try {
        return this.#fs.readFileFrom
          ? await this.#fs.readFileFrom(path, from)
          : (await this.#fs.readFile(path)).subarray(from);
      } catch (err) {
        if (errnoOf(err) === 'ENOENT') return null;
        throw err;
      }
    });
    if (bytes === null) return offset === 0 ? { records: [], endBytes: 0 } : null;
    if (offset > 0 && bytes[0] !== 0x0a) return null;
    const tail = offset > 0 ? bytes.subarray(1) : bytes;
    const parsed = parseJournal(tail);
    return { records: parsed.records, endBytes: offset + parsed.goodBytes };
  }

  /** Calls `listener` after each record this store appends from now on; returns the way to stop. */
  onJournalAppend(listener: JournalListener): () => void {
    this.#journalListeners.add(listener);
    return () => this.#journalListeners.delete(listener);
  }

  /** A new log file (exclusive create, 0600), or with `append` the existing one (bytes count from its size). */
  async openLog(
    rel: string,
    options: { readonly append?: boolean; readonly limitBytes?: number; readonly blockBytes?: number } = {},
  ): Promise<LogSink> {
    const path = this.resolve(rel);
    const append = options.append === true;
    const handle = await attempt('open', rel, 'cannot open log file', () =>
      this.#fs.open(path, append ? 'append' : 'create-exclusive', FILE_PERMISSIONS),
    );
    try {
      const initialBytes = append
        ? (await attempt('lstat', rel, 'cannot inspect log file', () => this.#fs.lstat(path))).sizeBytes
        : 0;
      await this.#syncParent(rel);
      failpoint(`log_opened:${basename(path)}`);
      return new LogSink(handle, {
        initialBytes,
        ...(options.limitBytes !== undefined ? { limitBytes: options.limitBytes } : {}),
        ...(options.blockBytes !== undefined ? { blockBytes: options.blockBytes } : {}),
      });
    } catch (err) {
      await ignoreFailure(() => handle.close());
      throw err;
    }
  }

  /**
   * Removes leftover `.<name>.tmp-<pid>-<rand>` files under D (on resume), never inside a pair's own folders
   * (`sessions/`, `outcome/`); returns their relative paths.
   */
  async cleanTempFiles(): Promise<string[]> {
    const removed: string[] = [];
    const pending: string[] = [''];
    for (let relDir = pending.pop(); relDir !== undefined; relDir = pending.pop()) {
      const dir = this.resolve(relDir);
      const entries = await attempt('readdir', relDir || '.', 'cannot list directory', () =>
        this.#fs.readdir(dir),
      );
      for (const entry of entries) {
        const rel = relDir === '' ? entry.name : `${relDir}/${entry.name}`;
        const path = join(dir, entry.name);
        if (entry.kind === 'directory') {
          if (!PAIR_FOLDERS.has(entry.name)) pending.push(rel);
        } else if (entry.kind === 'file' && TEMP_NAME.test(entry.name) && !this.#ownTemps.has(path)) {
          await attempt('unlink', rel, 'cannot remove temp file', () => this.#fs.unlink(path));
          removed.push(rel);
        }
      }
    }
    return removed.sort();
  }

  async #writeTemp(rel: string, target: string, bytes: Uint8Array): Promise<string> {
    const temp = join(
      dirname(target),
      `.${basename(target)}.tmp-${process.pid}-${randomBytes(8).toString('hex')}`,
    );
    this.#ownTemps.add(temp);
    try {
      const handle = await attempt('open', rel, 'cannot create temp file', () =>
        this.#fs.open(temp, 'create-exclusive', FILE_PERMISSIONS),
      );
      try {
        await attempt('write', rel, 'cannot write temp file', () => writeAll(handle, bytes));
        await attempt('fsync', rel, 'cannot fsync temp file', () => handle.sync());
      } catch (err) {
        await ignoreFailure(() => handle.close());
        throw err;
      }
      await attempt('close', rel, 'cannot close temp file', () => handle.close());
    } catch (err) {
      await this.#discardTemp(temp);
      throw err;
    }
    return temp;
  }

  /** Best effort: a temp left behind (crash, failed unlink) is removed by cleanTempFiles. */
  async #discardTemp(temp: string): Promise<void> {
    await ignoreFailure(() => this.#fs.unlink(temp));
    this.#ownTemps.delete(temp);
  }

  async #syncParent(rel: string): Promise<void> {
    const parentRel = checkRelative(rel).slice(0, -1).join('/');
    const parent = this.resolve(parentRel);
    await attempt('fsync', parentRel || '.', 'cannot fsync directory', () => this.#fs.syncDir(parent));
  }

  async #readJournalBytes(): Promise<Uint8Array | null> {
    const path = this.resolve(JOURNAL_FILE);
    return attempt('read', JOURNAL_FILE, 'cannot read journal', async () => {
      try {
        return await this.#fs.readFile(path);
      } catch (err) {
        if (errnoOf(err) === 'ENOENT') return null;
        throw err;
      }
    });
  }

  async #appendNow(event: JournalEvent): Promise<number> {
    // The type checker holds callers to the union; a JavaScript caller is still refused here.
    const { type, at } = event as { readonly type: unknown; readonly at: unknown };
    if (typeof type !== 'string' || type === '' || typeof at !== 'string') {
      throw storeError('journal event needs a string `type` and `at`', JOURNAL_FILE, 'serialize');
    }
    const state = await this.#journalState();
    const seq = state.lastSeq + 1;
    const { seq: _callerSeq, ...fields } = event as Record<string, unknown>;
    const line = `${state.needsNewline ? '\n' : ''}${serialize(JOURNAL_FILE, { seq, ...fields })}\n`;
    const bytes = new TextEncoder().encode(line);
    const created = state.sizeBytes === 0;
    const handle = await this.#openJournal();
    let syscall = 'write';
    try {
      await writeAll(handle, bytes);
      syscall = 'fsync';
      await handle.sync();
    } catch (err) {
      // Leave no partial record behind; if even that fails, the next append re-reads and repairs.
      await ignoreFailure(() => handle.truncate(state.sizeBytes));
      await ignoreFailure(() => handle.sync());
      await ignoreFailure(() => handle.close());
      this.#journal = undefined;
      throw storeError('cannot append to journal', JOURNAL_FILE, syscall, err);
    }
    failpoint(`journal:${event.type}`);
    // The record is durable once fsync returned: a failing close loses nothing.
    await ignoreFailure(() => handle.close());
    this.#journal = { lastSeq: seq, sizeBytes: state.sizeBytes + bytes.byteLength, needsNewline: false };
    if (created) await this.#syncParent(JOURNAL_FILE);
    if (this.#journalListeners.size > 0) {
      const record = { seq, ...fields } as JournalEvent & { readonly seq: number };
      for (const listener of this.#journalListeners) {
        try {
          listener(record, state.sizeBytes + bytes.byteLength);
        } catch {
          // The record is durable: a listener's fault is the listener's, never the append's.
        }
      }
    }
    return seq;
  }

  #openJournal(): Promise<FileHandle> {
    const path = this.resolve(JOURNAL_FILE);
    return attempt('open', JOURNAL_FILE, 'cannot open journal', () =>
      this.#fs.open(path, 'append', FILE_PERMISSIONS),
    );
  }

  /** The cached state while the file size matches it; otherwise re-read, and cut a torn last line. */
  async #journalState(): Promise<JournalState> {
    const cached = this.#journal;
    if (cached !== undefined) {
      const sizeBytes = (
        await attempt('lstat', JOURNAL_FILE, 'cannot inspect journal', () =>
          this.#fs.lstat(this.resolve(JOURNAL_FILE)),
        )
      ).sizeBytes;
      if (sizeBytes === cached.sizeBytes) return cached;
    }
    const bytes = (await this.#readJournalBytes()) ?? new Uint8Array();
    const parsed = parseJournal(bytes);
    if (parsed.goodBytes < bytes.byteLength) await this.#cutTornTail(parsed.goodBytes);
    const state = {
      lastSeq: parsed.records.at(-1)?.seq ?? 0,
      sizeBytes: parsed.goodBytes,
      needsNewline: parsed.needsNewline,
    };
    this.#journal = state;
    return state;
  }

  async #cutTornTail(goodBytes: number): Promise<void> {
    const handle = await this.#openJournal();
    try {
      await attempt('ftruncate', JOURNAL_FILE, 'cannot cut torn journal line', () =>
        handle.truncate(goodBytes),
      );
      await attempt('fsync', JOURNAL_FILE, 'cannot fsync journal', () => handle.sync());
    } finally {
      await ignoreFailure(() => handle.close());
    }
  }
}
