import { isAbsolute, join } from 'node:path';
import { JOURNAL_FILE } from '../../core/evidence-names.js';
import { ExitCode, RoboguideError } from '../../core/errors.js';
import type { JsonObject } from '../../core/json-object.js';
import { canCheckMany, canReadTails, errnoOf } from '../ports/file-system.js';
import type { FileSystem } from '../ports/file-system.js';
import { AtomicWriter, TEMP_NAME } from './atomic-write.js';
import { DirectorySync } from './directory-sync.js';
import { failedRule, jsonObject, type JsonCheck } from './json-check.js';
import { JournalFile, type JournalListener, type JournalSlice } from './journal-file.js';
import { openLogFiles, type LogOpenOptions } from './log-files.js';
import type { LogSink } from './log-sink.js';
import {
  attempt,
  checkRelative,
  DIR_PERMISSIONS,
  parentRel,
  serialize,
  storeError,
  unlessMissing,
} from './store-errors.js';
import { cleanTempFiles } from './temp-cleanup.js';
import type { JournalEvent, JournalRecord } from '../../core/journal-events.js';

/**
 * What a caller appends: one of the closed union of journal events (`core/journal-events.ts`), its `at` from the
 * injected clock. The store adds `seq`. What it reads back is a `JournalRecord`: the same union, each field to be
 * checked (an older writer may lack it), or a foreign type (an older or newer writer) that readers pass over.
 */

const utf8 = new TextDecoder('utf-8', { fatal: true });
const encoder = new TextEncoder();

/**
 * The batch output directory D (SPEC §4), one facade over its parts: atomic replace and exclusive publish
 * (atomic-write.ts), the journal (journal-file.ts), directory fsyncs (directory-sync.ts), log files (log-sink.ts)
 * and temp cleanup (temp-cleanup.ts). Every failure is RoboguideError('E_STORE') with the relative path, the
 * syscall and the errno code in context, the original error as cause.
 */
export class EvidenceStore {
  readonly #fs: FileSystem;
  readonly #root: string;
  readonly #dirs: DirectorySync;
  readonly #atomic: AtomicWriter;
  readonly #journal: JournalFile;

  constructor(fs: FileSystem, root: string) {
    if (!isAbsolute(root)) throw storeError('output directory must be an absolute path', root, 'resolve');
    this.#fs = fs;
    this.#root = root;
    const resolve = (rel: string): string => this.resolve(rel);
    this.#dirs = new DirectorySync(fs, resolve);
    this.#atomic = new AtomicWriter(fs, resolve, this.#dirs);
    this.#journal = new JournalFile(fs, this.resolve(JOURNAL_FILE), this.#dirs);
  }

  /**
   * D must not exist (it is made 0700) or be an empty folder of ours (made 0700 through the opened folder); it is
   * reached without following a link, and every folder above it is root's or ours and writable by no other user
   * unless sticky (docs/secrets.md "Local users"). Else exit 2, nothing changed.
   */
  static async createOutputDir(fs: FileSystem, root: string): Promise<void> {
    if (!isAbsolute(root)) throw storeError('output directory must be an absolute path', root, 'resolve');
    const claim = await attempt('mkdir', root, 'cannot create output directory', () => fs.claimOwnDir(root));
    if (claim.state === 'ready') return;
    if (claim.state === 'unsafe') {
      throw new RoboguideError('E_OUTPUT_UNSAFE', `--output: ${claim.path} ${claim.rule}`, {
        exitCode: ExitCode.invalidInput,
        context: { path: claim.path, rule: claim.rule, output: root },
        suggestions: ['choose an --output in a folder of yours that no other user can write to'],
      });
    }
    const entries = claim.state === 'not-empty' ? claim.entries : [];
    throw new RoboguideError('E_OUTPUT_NOT_EMPTY', `output ${root} exists and is not an empty directory`, {
      exitCode: ExitCode.invalidInput,
      context: {
        path: root,
        kind: claim.state === 'not-empty' ? 'directory' : 'file',
        entries: [...entries],
      },
      suggestions: [
        'choose a new --output directory',
        'to continue this batch: e1-batch resume --output ' + root,
      ],
    });
  }

  get root(): string {
    return this.#root;
  }

  /** Directory fsyncs this store has run (shared ones counted once). */
  get directorySyncs(): number {
    return this.#dirs.count;
  }

  /** Absolute path of a relative one, checked to stay inside D. */
  resolve(rel: string): string {
    return join(this.#root, ...checkRelative(rel));
  }

  async writeJsonAtomic(rel: string, value: unknown): Promise<void> {
    await this.#atomic.replace(rel, encoder.encode(`${serialize(rel, value, 2)}\n`));
  }

  /** Temp file in the same directory, write, fsync, rename over `rel`, fsync the directory; 0600. */
  async writeBytesAtomic(rel: string, bytes: Uint8Array): Promise<void> {
    await this.#atomic.replace(rel, bytes);
  }

  /**
   * Several JSON files replaced together, one directory fsync per directory (docs/spec.md §4 "Durability"): each
   * atomic, all durable on return, no order between them after a crash.
   */
  async writeJsonGroup(entries: readonly { readonly rel: string; readonly value: unknown }[]): Promise<void> {
    const encoded = entries.map(({ rel, value }) => ({
      rel,
      bytes: encoder.encode(`${serialize(rel, value, 2)}\n`),
    }));
    await this.#atomic.replaceGroup(encoded);
  }

  /** The claim primitive: link(2) of a fsynced temp file; never replaces an existing `rel`. */
  async publishExclusive(rel: string, value: unknown): Promise<'published' | 'exists'> {
    return this.#atomic.publish(rel, encoder.encode(`${serialize(rel, value, 2)}\n`));
  }

  /**
   * The JSON object in `rel`, parsed through `check` (any JSON object without one); null when `rel` does not exist.
   * E_STORE (syscall `parse`) when it is not valid JSON or fails the check, naming the rule.
   */
  readJson(rel: string): Promise<JsonObject | null>;
  readJson<T>(rel: string, check: JsonCheck<T>): Promise<T | null>;
  async readJson(rel: string, check: JsonCheck<unknown> = jsonObject): Promise<unknown> {
    const path = this.resolve(rel);
    const bytes = await attempt('read', rel, 'cannot read file', () =>
      unlessMissing(() => this.#fs.readFile(path), null),
    );
    if (bytes === null) return null;
    let value: unknown;
    try {
      value = JSON.parse(utf8.decode(bytes));
    } catch (err) {
      throw storeError('corrupt JSON file', rel, 'parse', err);
    }
    const checked = failedRule(check, value);
    if ('rule' in checked) throw storeError(`unexpected content (${checked.rule}) in file`, rel, 'parse');
    return checked.data;
  }

  /** The bytes of `rel`; null when it does not exist (a symlink is never followed). */
  async readBytes(rel: string): Promise<Uint8Array | null> {
    const path = this.resolve(rel);
    return unlessMissing(() => this.#fs.readFile(path), null);
  }

  /**
   * The last `maxBytes` of `rel` (or all of it when shorter); null when it does not exist or cannot be read (a hint
   * reads it: never an error). Never the whole file when the file system can read from an offset.
   */
  async readTail(rel: string, maxBytes: number): Promise<Uint8Array | null> {
    const path = this.resolve(rel);
    try {
      const info = await this.#fs.lstat(path);
      if (info.kind !== 'file') return null;
      const from = Math.max(0, info.sizeBytes - maxBytes);
      const fs = this.#fs;
      const bytes = canReadTails(fs) ? await fs.readFileFrom(path, from) : await fs.readFile(path);
      return bytes.subarray(Math.max(0, bytes.length - maxBytes));
    } catch {
      return null;
    }
  }

  async exists(rel: string): Promise<boolean> {
    const path = this.resolve(rel);
    return attempt('lstat', rel, 'cannot inspect path', () =>
      unlessMissing(async () => (await this.#fs.lstat(path), true), false),
    );
  }

  /** `exists` for many paths at once (in order); one E_STORE for the first that cannot be inspected. */
  async existAll(rels: readonly string[]): Promise<boolean[]> {
    const paths = rels.map((rel) => this.resolve(rel));
    const fs = this.#fs;
    if (canCheckMany(fs)) {
      const many = fs.existMany.bind(fs);
      return attempt('lstat', rels[0] ?? '.', 'cannot inspect path', () => many(paths));
    }
    return Promise.all(rels.map((rel) => this.exists(rel)));
  }

  /** Sorted entry names of a directory (temp files left out); empty when it does not exist. */
  async list(relDir: string): Promise<string[]> {
    const path = this.resolve(relDir);
    const entries = await attempt('readdir', relDir, 'cannot list directory', () =>
      unlessMissing(() => this.#fs.readdir(path), []),
    );
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
      if (created) await this.#dirs.sync(parentRel(relDir));
    }
  }

  /** One JSON line in `events.jsonl` (O_APPEND, fsync per record); returns the record's `seq`. */
  appendJournal(event: JournalEvent): Promise<number> {
    return this.#journal.append(event);
  }

  /** Every complete record, after the appends already requested; a torn last line is ignored. */
  readJournal(): Promise<JournalRecord[]> {
    return this.#journal.read();
  }

  /** Like readJournal, with the offset just past the last complete record. */
  readJournalSlice(): Promise<JournalSlice> {
    return this.#journal.readSlice();
  }

  /** The records from byte `offset` on (where an earlier read ended); null: read it all instead. */
  readJournalFrom(offset: number): Promise<JournalSlice | null> {
    return this.#journal.readFrom(offset);
  }

  /** Calls `listener` after each record this store appends from now on; returns the way to stop. */
  onJournalAppend(listener: JournalListener): () => void {
    return this.#journal.onAppend(listener);
  }

  /** A new log file (exclusive create, 0600), or with `append` the existing one (bytes count from its size). */
  async openLog(rel: string, options: LogOpenOptions): Promise<LogSink> {
    const [sink] = await this.openLogs([rel] as const, options);
    return sink;
  }

  /**
   * Several log files opened as `openLog` does, their directory fsynced once (docs/spec.md §6.2 "Durability"):
   * every entry is durable before any sink is handed out. On a failure, those already opened are closed.
   */
  openLogs<const R extends readonly string[]>(
    rels: R,
    options: LogOpenOptions,
  ): Promise<{ -readonly [K in keyof R]: LogSink }> {
    return openLogFiles(this.#fs, (rel) => this.resolve(rel), this.#dirs, rels, options);
  }

  /**
   * Removes leftover `.<name>.tmp-<pid>-<rand>` files under D (on resume), never inside a pair's own folders
   * (`sessions/`, `outcome/`); returns their relative paths.
   */
  cleanTempFiles(): Promise<string[]> {
    return cleanTempFiles(this.#fs, this.#root, this.#atomic.ownTemps);
  }
}
