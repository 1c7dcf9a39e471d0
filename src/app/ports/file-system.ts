/**
 * The few low-level file operations the evidence store needs (SPEC §4), behind a port so tests
 * can inject faults (EIO before a rename, ENOSPC on a write, "rename done but error reported").
 * Paths are absolute. Failures are thrown as Node-style errors carrying an errno `code`
 * (`ENOENT`, `EEXIST`, `EIO`, `ENOSPC`…); mapping them to typed errors is the caller's job.
 */

/**
 * `create-exclusive`: O_WRONLY|O_CREAT|O_EXCL (fails with EEXIST).
 * `append`: O_WRONLY|O_APPEND|O_CREAT. Neither follows a symlink at the final component.
 */
export type OpenMode = 'create-exclusive' | 'append';

export type EntryKind = 'file' | 'directory' | 'symlink' | 'other';

export interface DirEntry {
  readonly name: string;
  readonly kind: EntryKind;
  /** For kind `other`, what it is when the file system says: a host process's endpoint (socket, FIFO) or a device. */
  readonly special?: 'socket' | 'fifo' | 'device';
}

export interface FileInfo {
  readonly kind: EntryKind;
  readonly sizeBytes: number;
  /** Permission bits only (`mode & 0o7777`). */
  readonly permissions: number;
  /** The owner's user id, when the file system says (the mount guard refuses a folder of an unexpected owner). */
  readonly uid?: number;
  /** `<st_dev>:<st_ino>` in decimal, when the file system says: which file this is, whatever its name now. */
  readonly fileId?: string;
  /** The last modification time (epoch ms), when the file system says: a cache keyed by size and time uses it. */
  readonly modifiedMs?: number;
}

export interface FileHandle {
  readonly path: string;
  /** One write(2) at the current position (end of file in `append` mode): may write fewer bytes than given. */
  write(bytes: Uint8Array): Promise<number>;
  sync(): Promise<void>;
  truncate(sizeBytes: number): Promise<void>;
  close(): Promise<void>;
}

/**
 * What claiming an output folder found (docs/secrets.md "Local users"): `ready` (made by us, or an existing empty
 * folder of ours, now 0700); `unsafe` names the folder on the path and the rule it breaks.
 */
export type OwnDirClaim =
  | { readonly state: 'ready'; readonly created: boolean }
  | { readonly state: 'not-empty'; readonly entries: readonly string[] }
  | { readonly state: 'not-a-directory' }
  | { readonly state: 'unsafe'; readonly path: string; readonly rule: string };

export interface FileSystem {
  /** `permissions` applies when the file is created (subject to the umask). */
  open(path: string, mode: OpenMode, permissions: number): Promise<FileHandle>;
  /** rename(2): replaces `to` atomically. */
  rename(from: string, to: string): Promise<void>;
  /** link(2): fails with EEXIST when `to` exists — the exclusive publish primitive. */
  link(existing: string, to: string): Promise<void>;
  unlink(path: string): Promise<void>;
  /** One directory, not recursive; EEXIST when anything exists at `path`. */
  mkdir(path: string, permissions: number): Promise<void>;
  /** mkdir -p: `path` and any missing parent (each made with `permissions`, subject to the umask); no error when it exists. */
  mkdirp(path: string, permissions: number): Promise<void>;
  chmod(path: string, permissions: number): Promise<void>;
  /**
   * The output folder, reached from `/` without following a link, every folder above it owned by root or us and
   * writable by no other user unless sticky; made 0700, or an existing empty folder of ours made 0700 by fchmod.
   * Missing folders above it are made (0755, the umask applies) the same way, never through a link.
   */
  claimOwnDir(path: string): Promise<OwnDirClaim>;
  readFile(path: string): Promise<Uint8Array>;
  /**
   * A file the user named (a manifest, a pinned source file), read whole, following symlinks as the user's own
   * tools would. Never for evidence (readFile refuses a symlink there).
   */
  readUserFile(path: string): Promise<Uint8Array>;
  /** The same, streamed in chunks: for hashing a file of any size in bounded memory. */
  streamUserFile(path: string): AsyncIterable<Uint8Array>;
  /** Appends `bytes` (O_APPEND), creating the file with `permissions` when it does not exist. */
  appendFile(path: string, bytes: Uint8Array, permissions: number): Promise<void>;
  readdir(path: string): Promise<DirEntry[]>;
  /** Does not follow a symlink at the final component. */
  lstat(path: string): Promise<FileInfo>;
  /** open(O_DIRECTORY) + fsync + close: makes entries created, renamed or removed in `path` durable. */
  syncDir(path: string): Promise<void>;
  /** realpath(3): the canonical path with every symlink resolved; ENOENT when it does not exist. */
  realpath(path: string): Promise<string>;
}

/** The errno code of a thrown file-system error (`ENOENT`…), or undefined. */
export function errnoOf(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null || !('code' in err)) return undefined;
  const code = err.code;
  return typeof code === 'string' ? code : undefined;
}

/*
 * The port is closed (every FileSystem method required); what only some file systems do faster is a capability of
 * its own, asked for with its typed check.
 */

/** The bytes from `offset` to the end of the file (empty when it is shorter). Without it the store reads the whole file and keeps the tail. */
export interface TailReads {
  readFileFrom(path: string, offset: number): Promise<Uint8Array>;
}

/** Whether each path exists (lstat: a symlink counts), for many paths at once. Without it the store lstats them one by one. */
export interface BulkExistence {
  existMany(paths: readonly string[]): Promise<boolean[]>;
}

export const canReadTails = (fs: object): fs is TailReads =>
  typeof (fs as Record<string, unknown>)['readFileFrom'] === 'function';
export const canCheckMany = (fs: object): fs is BulkExistence =>
  typeof (fs as Record<string, unknown>)['existMany'] === 'function';
