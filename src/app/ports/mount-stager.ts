import type { MountMode } from '../../core/mount-mode.js';
import type { FileInfo } from './file-system.js';

/**
 * Opens bind sources one component at a time, relative to the folder already opened (an `openat` step: no path is
 * resolved twice), and binds an opened folder onto a staging point the engine is given (docs/spec.md 5.3).
 */

/** A folder held open (O_PATH): `info` is what fstat said of the object itself. */
export interface OpenedFolder {
  readonly handle: number;
  readonly info: FileInfo;
}

/** One component opened below an opened folder, without following a link. */
export type OpenedChild =
  | { readonly kind: 'opened'; readonly folder: OpenedFolder }
  | { readonly kind: 'missing' }
  | { readonly kind: 'symlink' }
  | { readonly kind: 'not-folder' }
  | { readonly kind: 'error'; readonly errno: string };

export interface MountStager {
  /** `staged` when this host lets us bind (probed once per process), else `walked`. */
  mode(): Promise<MountMode>;
  /** `/` itself, opened. */
  openRoot(): Promise<OpenedFolder>;
  /** `name` (one component, never `..`) inside `parent`, opened without following a link. */
  openChild(parent: OpenedFolder, name: string): Promise<OpenedChild>;
  /** mkdir of `name` inside `parent` (through the opened object); throws with the errno (`EEXIST`…). */
  makeChild(parent: OpenedFolder, name: string, permissions: number): Promise<void>;
  close(folder: OpenedFolder): Promise<void>;
  /**
   * Binds the opened folder onto a new staging point (nosuid, nodev; read-only when asked) and returns the staging
   * point's path, which is in flight until `settled` or `release`d.
   */
  bind(folder: OpenedFolder, readOnly: boolean): Promise<string>;
  /** The container that uses `stagedPath` exists (or will never be made): a sweep may judge the point by it now. */
  settled(stagedPath: string): void;
  /** Unmounts the staging point and removes it (idempotent). */
  release(stagedPath: string): Promise<void>;
  /**
   * Unmounts the staging points no container of the engine uses any more, whose maker is gone or is this process
   * (and not in flight); returns the ones released.
   */
  sweep(): Promise<string[]>;
}
