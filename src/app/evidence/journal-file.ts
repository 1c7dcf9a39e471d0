import type { JournalEvent, JournalRecord } from '../../core/journal-events.js';
import { JOURNAL_FILE } from '../../core/evidence-names.js';
import { failpoint } from '../ports/failpoints.js';
import { canReadTails, type FileHandle, type FileSystem } from '../ports/file-system.js';
import type { DirectorySync } from './directory-sync.js';
import {
  attempt,
  FILE_PERMISSIONS,
  ignoreFailure,
  serialize,
  storeError,
  unlessMissing,
  writeAll,
} from './store-errors.js';

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

/**
 * `events.jsonl` (SPEC §4): one JSON line per record (O_APPEND, fsync per record), `seq` added here. One process
 * appends at a time (the supervisor); appends within it are serialized. A torn last line (a crash mid-append) is
 * cut before the next append; a complete last record without its newline gets one.
 */
export class JournalFile {
  readonly #fs: FileSystem;
  readonly #path: string;
  readonly #dirs: DirectorySync;
  #state: JournalState | undefined;
  #chain: Promise<unknown> = Promise.resolve();
  readonly #listeners = new Set<JournalListener>();

  constructor(fs: FileSystem, path: string, dirs: DirectorySync) {
    this.#fs = fs;
    this.#path = path;
    this.#dirs = dirs;
  }

  /** Returns the record's `seq`. */
  append(event: JournalEvent): Promise<number> {
    const run = this.#chain.then(() => this.#appendNow(event));
    this.#chain = run.catch(() => undefined);
    return run;
  }

  /** Every complete record, after the appends already requested; a torn last line is ignored. */
  async read(): Promise<JournalRecord[]> {
    return (await this.readSlice()).records;
  }

  /** Like read, with the offset just past the last complete record. */
  async readSlice(): Promise<JournalSlice> {
    await this.#chain;
    const bytes = await this.#readBytes();
    if (bytes === null) return { records: [], endBytes: 0 };
    const parsed = parseJournal(bytes);
    return { records: parsed.records, endBytes: parsed.goodBytes };
  }

  /**
   * The complete records from byte `offset` on (an offset some earlier read or append ended at), and where they end.
   * Null when the journal is shorter than `offset` or `offset` is not at the start of a line: the caller reads it
   * all instead.
   */
  async readFrom(offset: number): Promise<JournalSlice | null> {
    const from = Math.max(0, offset - 1);
    const fs = this.#fs;
    const readFrom = canReadTails(fs) ? fs.readFileFrom.bind(fs) : null;
    const bytes = await attempt('read', JOURNAL_FILE, 'cannot read journal', () =>
      unlessMissing(
        async () =>
          readFrom ? await readFrom(this.#path, from) : (await this.#fs.readFile(this.#path)).subarray(from),
        null,
      ),
    );
    if (bytes === null) return offset === 0 ? { records: [], endBytes: 0 } : null;
    if (offset > 0 && bytes[0] !== 0x0a) return null;
    const tail = offset > 0 ? bytes.subarray(1) : bytes;
    const parsed = parseJournal(tail);
    return { records: parsed.records, endBytes: offset + parsed.goodBytes };
  }

  /** Calls `listener` after each record appended from now on; returns the way to stop. */
  onAppend(listener: JournalListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #readBytes(): Promise<Uint8Array | null> {
    return attempt('read', JOURNAL_FILE, 'cannot read journal', () =>
      unlessMissing(() => this.#fs.readFile(this.#path), null),
    );
  }

  async #appendNow(event: JournalEvent): Promise<number> {
    // The type checker holds callers to the union; a JavaScript caller is still refused here.
    const { type, at } = event as { readonly type: unknown; readonly at: unknown };
    if (typeof type !== 'string' || type === '' || typeof at !== 'string') {
      throw storeError('journal event needs a string `type` and `at`', JOURNAL_FILE, 'serialize');
    }
    const state = await this.#currentState();
    const seq = state.lastSeq + 1;
    const { seq: _callerSeq, ...fields } = event as Record<string, unknown>;
    const line = `${state.needsNewline ? '\n' : ''}${serialize(JOURNAL_FILE, { seq, ...fields })}\n`;
    const bytes = new TextEncoder().encode(line);
    const created = state.sizeBytes === 0;
    const handle = await this.#open();
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
      this.#state = undefined;
      throw storeError('cannot append to journal', JOURNAL_FILE, syscall, err);
    }
    failpoint(`journal:${event.type}`);
    // The record is durable once fsync returned: a failing close loses nothing.
    await ignoreFailure(() => handle.close());
    const endBytes = state.sizeBytes + bytes.byteLength;
    this.#state = { lastSeq: seq, sizeBytes: endBytes, needsNewline: false };
    if (created) await this.#dirs.sync('');
    this.#tell({ seq, ...fields } as JournalEvent & { readonly seq: number }, endBytes);
    return seq;
  }

  #tell(record: JournalEvent & { readonly seq: number }, endBytes: number): void {
    for (const listener of this.#listeners) {
      try {
        listener(record, endBytes);
      } catch {
        // The record is durable: a listener's fault is the listener's, never the append's.
      }
    }
  }

  #open(): Promise<FileHandle> {
    return attempt('open', JOURNAL_FILE, 'cannot open journal', () =>
      this.#fs.open(this.#path, 'append', FILE_PERMISSIONS),
    );
  }

  /** The cached state while the file size matches it; otherwise re-read, and cut a torn last line. */
  async #currentState(): Promise<JournalState> {
    const cached = this.#state;
    if (cached !== undefined) {
      const info = await attempt('lstat', JOURNAL_FILE, 'cannot inspect journal', () =>
        this.#fs.lstat(this.#path),
      );
      if (info.sizeBytes === cached.sizeBytes) return cached;
    }
    const bytes = (await this.#readBytes()) ?? new Uint8Array();
    const parsed = parseJournal(bytes);
    if (parsed.goodBytes < bytes.byteLength) await this.#cutTornTail(parsed.goodBytes);
    const state = {
      lastSeq: parsed.records.at(-1)?.seq ?? 0,
      sizeBytes: parsed.goodBytes,
      needsNewline: parsed.needsNewline,
    };
    this.#state = state;
    return state;
  }

  async #cutTornTail(goodBytes: number): Promise<void> {
    const handle = await this.#open();
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
