import { randomBytes } from 'node:crypto';
import { basename, dirname, join } from 'node:path';
import { failpoint } from '../ports/failpoints.js';
import { errnoOf } from '../ports/file-system.js';
import type { FileSystem } from '../ports/file-system.js';
import type { DirectorySync } from './directory-sync.js';
import { attempt, FILE_PERMISSIONS, ignoreFailure, parentRel, storeError, writeAll } from './store-errors.js';

/** `.<name>.tmp-<pid>-<16 hex>`: the only names temp cleanup ever removes. */
export const TEMP_NAME = /^\..+\.tmp-\d+-[0-9a-f]{16}$/;

/** One file of an atomic group: its path relative to the output directory, and its bytes. */
export interface AtomicEntry {
  readonly rel: string;
  readonly bytes: Uint8Array;
}

/**
 * Atomic replace and exclusive publish (SPEC §4): a temp file in the target's directory, written and fsynced,
 * then renamed over (or linked to) the target, then the directory fsynced. Remembers its own temps in flight,
 * which temp cleanup must leave alone.
 */
export class AtomicWriter {
  readonly #fs: FileSystem;
  readonly #resolve: (rel: string) => string;
  readonly #dirs: DirectorySync;
  readonly ownTemps = new Set<string>();

  constructor(fs: FileSystem, resolve: (rel: string) => string, dirs: DirectorySync) {
    this.#fs = fs;
    this.#resolve = resolve;
    this.#dirs = dirs;
  }

  /** Temp file in the same directory, write, fsync, rename over `rel`, fsync the directory; 0600. */
  async replace(rel: string, bytes: Uint8Array): Promise<void> {
    await this.replaceGroup([{ rel, bytes }]);
  }

  /**
   * Several files replaced together: each temp written and fsynced, each renamed over its target (in order), then
   * ONE fsync per directory. Each file is replaced atomically; all of them are durable when this returns. Between
   * two of them there is no order after a crash: only for files no reader needs in a given order.
   */
  async replaceGroup(entries: readonly AtomicEntry[]): Promise<void> {
    const targets = entries.map((entry) => this.#resolve(entry.rel));
    const temps: string[] = [];
    try {
      for (const [i, entry] of entries.entries()) {
        temps.push(await this.#writeTemp(entry.rel, targets[i] ?? '', entry.bytes));
        failpoint(`write:${basename(targets[i] ?? '')}:temp_written`);
      }
      for (const [i, entry] of entries.entries()) {
        const temp = temps[i] ?? '';
        const target = targets[i] ?? '';
        await attempt('rename', entry.rel, 'cannot replace file', () => this.#fs.rename(temp, target));
        this.ownTemps.delete(temp);
        failpoint(`write:${basename(target)}:renamed`);
      }
    } catch (err) {
      for (const temp of temps) if (this.ownTemps.has(temp)) await this.#discardTemp(temp);
      throw err;
    }
    await this.#dirs.syncAll(entries.map((entry) => parentRel(entry.rel)));
  }

  /** The claim primitive: link(2) of a fsynced temp file; never replaces an existing `rel`. */
  async publish(rel: string, bytes: Uint8Array): Promise<'published' | 'exists'> {
    const target = this.#resolve(rel);
    const temp = await this.#writeTemp(rel, target, bytes);
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
    await this.#dirs.sync(parentRel(rel));
    return 'published';
  }

  async #writeTemp(rel: string, target: string, bytes: Uint8Array): Promise<string> {
    const temp = join(
      dirname(target),
      `.${basename(target)}.tmp-${process.pid}-${randomBytes(8).toString('hex')}`,
    );
    this.ownTemps.add(temp);
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

  /** Best effort: a temp left behind (crash, failed unlink) is removed by temp cleanup. */
  async #discardTemp(temp: string): Promise<void> {
    await ignoreFailure(() => this.#fs.unlink(temp));
    this.ownTemps.delete(temp);
  }
}
