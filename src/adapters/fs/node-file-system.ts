import { constants, createReadStream, lstatSync } from 'node:fs';
import type { BigIntStats, Dirent, Stats } from 'node:fs';
import {
  appendFile,
  chmod,
  link,
  lstat,
  mkdir,
  open,
  readFile,
  readdir,
  realpath,
  rename,
  unlink,
} from 'node:fs/promises';
import type { FileHandle as NodeFileHandle } from 'node:fs/promises';
import { claimOwnDir } from './private-dir.js';
import type {
  OwnDirClaim,
  DirEntry,
  EntryKind,
  FileHandle,
  FileInfo,
  FileSystem,
  OpenMode,
} from '../../app/ports/file-system.js';
import type { BulkExistence, TailReads } from '../../app/ports/file-system.js';
import { makeDirs } from './make-dirs.js';

const OPEN_FLAGS: Readonly<Record<OpenMode, number>> = {
  'create-exclusive': constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
  append: constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW,
};

function kindOf(entry: Dirent | Stats | BigIntStats): EntryKind {
  if (entry.isFile()) return 'file';
  if (entry.isDirectory()) return 'directory';
  if (entry.isSymbolicLink()) return 'symlink';
  return 'other';
}

class NodeHandle implements FileHandle {
  constructor(
    readonly path: string,
    private readonly handle: NodeFileHandle,
  ) {}

  async write(bytes: Uint8Array): Promise<number> {
    const { bytesWritten } = await this.handle.write(bytes, 0, bytes.byteLength, null);
    return bytesWritten;
  }

  sync(): Promise<void> {
    return this.handle.sync();
  }

  truncate(sizeBytes: number): Promise<void> {
    return this.handle.truncate(sizeBytes);
  }

  close(): Promise<void> {
    return this.handle.close();
  }
}

/** The FileSystem port on node:fs/promises. */
export class NodeFileSystem implements FileSystem, TailReads, BulkExistence {
  async open(path: string, mode: OpenMode, permissions: number): Promise<FileHandle> {
    return new NodeHandle(path, await open(path, OPEN_FLAGS[mode], permissions));
  }

  rename(from: string, to: string): Promise<void> {
    return rename(from, to);
  }

  link(existing: string, to: string): Promise<void> {
    return link(existing, to);
  }

  unlink(path: string): Promise<void> {
    return unlink(path);
  }

  async mkdir(path: string, permissions: number): Promise<void> {
    await mkdir(path, { mode: permissions });
  }

  async mkdirp(path: string, permissions: number): Promise<void> {
    await makeDirs(path, permissions);
  }

  chmod(path: string, permissions: number): Promise<void> {
    return chmod(path, permissions);
  }

  claimOwnDir(path: string): Promise<OwnDirClaim> {
    return claimOwnDir(path);
  }

  async readFile(path: string): Promise<Uint8Array> {
    return readFile(path, { flag: constants.O_RDONLY | constants.O_NOFOLLOW });
  }

  readUserFile(path: string): Promise<Uint8Array> {
    return readFile(path);
  }

  async *streamUserFile(path: string): AsyncIterable<Uint8Array> {
    for await (const chunk of createReadStream(path)) yield chunk as Buffer;
  }

  appendFile(path: string, bytes: Uint8Array, permissions: number): Promise<void> {
    return appendFile(path, bytes, { mode: permissions });
  }

  /** Synchronous lstat in a loop: for thousands of look-ups a hop to the thread pool each costs far more. */
  existMany(paths: readonly string[]): Promise<boolean[]> {
    // A throw in the executor (EACCES, ENOTDIR…) rejects the promise.
    return new Promise((resolve) =>
      resolve(paths.map((p) => lstatSync(p, { throwIfNoEntry: false }) !== undefined)),
    );
  }

  async readFileFrom(path: string, offset: number): Promise<Uint8Array> {
    const handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      const size = (await handle.stat()).size;
      const length = Math.max(0, size - offset);
      const bytes = new Uint8Array(length);
      let done = 0;
      while (done < length) {
        const { bytesRead } = await handle.read(bytes, done, length - done, offset + done);
        if (bytesRead === 0) break;
        done += bytesRead;
      }
      return bytes.subarray(0, done);
    } finally {
      await handle.close();
    }
  }

  async readdir(path: string): Promise<DirEntry[]> {
    const entries = await readdir(path, { withFileTypes: true });
    return entries.map((e) => {
      const special = e.isSocket()
        ? 'socket'
        : e.isFIFO()
          ? 'fifo'
          : e.isBlockDevice() || e.isCharacterDevice()
            ? 'device'
            : undefined;
      return { name: e.name, kind: kindOf(e), ...(special !== undefined ? { special } : {}) };
    });
  }

  async lstat(path: string): Promise<FileInfo> {
    const info = await lstat(path, { bigint: true });
    return {
      kind: kindOf(info),
      sizeBytes: Number(info.size),
      permissions: Number(info.mode & 0o7777n),
      uid: Number(info.uid),
      fileId: `${info.dev}:${info.ino}`,
      modifiedMs: Number(info.mtimeNs / 1_000_000n),
    };
  }

  realpath(path: string): Promise<string> {
    return realpath(path);
  }

  async syncDir(path: string): Promise<void> {
    const handle = await open(path, constants.O_RDONLY | constants.O_DIRECTORY);
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  }
}
