import type { FileSystem } from '../ports/file-system.js';
import { attempt } from './store-errors.js';

interface Pending {
  /** The fsync of this directory now running, if any. */
  running: Promise<void> | null;
  /** The one fsync that starts when `running` ends: every caller who came while `running` ran shares it. */
  next: Promise<void> | null;
}

/**
 * Directory fsyncs, made to count (docs/spec.md §4 "Durability"): a caller's entry (a rename, a link, a new file
 * or folder) is durable once an fsync of its directory that STARTED AFTER the entry was made has returned. So
 * callers who ask while an fsync of the same directory runs all wait for the single next one instead of each
 * running their own, and a group of entries made together (`syncAll`) takes one fsync per directory.
 * A failed fsync fails every caller who shared it, each with E_STORE naming the directory.
 */
export class DirectorySync {
  readonly #fs: FileSystem;
  readonly #resolve: (rel: string) => string;
  readonly #pending = new Map<string, Pending>();
  #count = 0;

  constructor(fs: FileSystem, resolve: (rel: string) => string) {
    this.#fs = fs;
    this.#resolve = resolve;
  }

  /** Directory fsyncs run so far (for tests and the bench). */
  get count(): number {
    return this.#count;
  }

  /** Makes every entry already made in `relDir` ('' for the output directory) durable. */
  sync(relDir: string): Promise<void> {
    let pending = this.#pending.get(relDir);
    if (pending === undefined) {
      pending = { running: null, next: null };
      this.#pending.set(relDir, pending);
    }
    const running = pending.running;
    if (running === null) return this.#start(relDir, pending);
    if (pending.next === null) {
      const state = pending;
      pending.next = running
        .catch(() => undefined)
        .then(() => {
          state.next = null;
          return this.#start(relDir, state);
        });
    }
    return pending.next;
  }

  /** One fsync per distinct directory of `relDirs`, run together. */
  async syncAll(relDirs: Iterable<string>): Promise<void> {
    await Promise.all([...new Set(relDirs)].map((relDir) => this.sync(relDir)));
  }

  #start(relDir: string, pending: Pending): Promise<void> {
    this.#count += 1;
    const path = this.#resolve(relDir);
    const run = attempt('fsync', relDir || '.', 'cannot fsync directory', () =>
      this.#fs.syncDir(path),
    ).finally(() => {
      if (pending.running === run) pending.running = null;
      if (pending.running === null && pending.next === null) this.#pending.delete(relDir);
    });
    pending.running = run;
    return run;
  }
}
