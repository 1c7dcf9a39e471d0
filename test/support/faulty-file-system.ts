import type {
  DirEntry,
  FileHandle,
  FileInfo,
  FileSystem,
  OpenMode,
  OwnDirClaim,
} from '../../src/app/ports/file-system.js';

export type FsOperation =
  | 'open'
  | 'write'
  | 'sync'
  | 'truncate'
  | 'close'
  | 'rename'
  | 'link'
  | 'unlink'
  | 'mkdir'
  | 'mkdirp'
  | 'readUserFile'
  | 'appendFile'
  | 'chmod'
  | 'claimOwnDir'
  | 'readFile'
  | 'readdir'
  | 'lstat'
  | 'syncDir'
  | 'realpath';

/**
 * Fires at the `nth` call (1-based, default 1) of `op` on a path matching `path` (a RegExp, or a
 * substring of any path of the call), and on the `times - 1` matching calls after it.
 * `before`: throw without performing the call. `after`: perform it, then throw ("rename done but
 * error reported"). `partial` (write only), as the kernel does when the disk fills: a short write
 * of the first `partialBytes` bytes that reports that count, then the next write on that file throws.
 */
export interface FaultRule {
  readonly op: FsOperation;
  readonly path?: RegExp | string;
  readonly nth?: number;
  readonly times?: number;
  readonly when?: 'before' | 'after' | 'partial';
  /** errno code of the thrown error; default EIO. */
  readonly code?: string;
  readonly partialBytes?: number;
}

export interface FsCall {
  readonly op: FsOperation;
  readonly paths: readonly string[];
}

export interface FaultyFileSystemOptions {
  readonly rules?: readonly FaultRule[];
  /** Short writes: each write(2) accepts at most this many bytes. */
  readonly maxWriteBytes?: number;
}

interface ArmedRule {
  readonly rule: FaultRule;
  seen: number;
}

function matches(pattern: RegExp | string | undefined, paths: readonly string[]): boolean {
  if (pattern === undefined) return true;
  return paths.some((p) => (typeof pattern === 'string' ? p.includes(pattern) : pattern.test(p)));
}

export function injectedError(code: string, op: FsOperation, path: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`${code}: injected fault, ${op} '${path}'`), { code, syscall: op, path });
}

/** A FileSystem wrapper that records every call and injects faults by rule. */
export class FaultyFileSystem implements FileSystem {
  readonly calls: FsCall[] = [];
  readonly #inner: FileSystem;
  readonly #rules: ArmedRule[] = [];
  readonly #maxWriteBytes: number;
  readonly #inFlight = new Map<FsOperation, number>();
  readonly #maxInFlight = new Map<FsOperation, number>();

  constructor(inner: FileSystem, options: FaultyFileSystemOptions = {}) {
    this.#inner = inner;
    this.#maxWriteBytes = options.maxWriteBytes ?? Number.POSITIVE_INFINITY;
    for (const rule of options.rules ?? []) this.addRule(rule);
  }

  addRule(rule: FaultRule): void {
    this.#rules.push({ rule, seen: 0 });
  }

  /** Calls of `op` so far, on a path matching `path` when given. */
  count(op: FsOperation, path?: RegExp | string): number {
    return this.calls.filter((c) => c.op === op && matches(path, c.paths)).length;
  }

  /** The most calls of `op` that were in progress at the same time. */
  maxInFlight(op: FsOperation): number {
    return this.#maxInFlight.get(op) ?? 0;
  }

  async open(path: string, mode: OpenMode, permissions: number): Promise<FileHandle> {
    const handle = await this.#invoke('open', [path], () => this.#inner.open(path, mode, permissions));
    return this.#wrap(handle);
  }

  rename(from: string, to: string): Promise<void> {
    return this.#invoke('rename', [from, to], () => this.#inner.rename(from, to));
  }

  link(existing: string, to: string): Promise<void> {
    return this.#invoke('link', [existing, to], () => this.#inner.link(existing, to));
  }

  unlink(path: string): Promise<void> {
    return this.#invoke('unlink', [path], () => this.#inner.unlink(path));
  }

  mkdir(path: string, permissions: number): Promise<void> {
    return this.#invoke('mkdir', [path], () => this.#inner.mkdir(path, permissions));
  }

  mkdirp(path: string, permissions: number): Promise<void> {
    return this.#invoke('mkdirp', [path], () => this.#inner.mkdirp(path, permissions));
  }

  readUserFile(path: string): Promise<Uint8Array> {
    return this.#invoke('readUserFile', [path], () => this.#inner.readUserFile(path));
  }

  /** Streams pass through unfaulted (a fault at open time would need the stream's own error path). */
  streamUserFile(path: string): AsyncIterable<Uint8Array> {
    return this.#inner.streamUserFile(path);
  }

  appendFile(path: string, bytes: Uint8Array, permissions: number): Promise<void> {
    return this.#invoke('appendFile', [path], () => this.#inner.appendFile(path, bytes, permissions));
  }

  claimOwnDir(path: string): Promise<OwnDirClaim> {
    return this.#invoke('claimOwnDir', [path], () => this.#inner.claimOwnDir(path));
  }

  realpath(path: string): Promise<string> {
    return this.#invoke('realpath', [path], () => this.#inner.realpath(path));
  }

  chmod(path: string, permissions: number): Promise<void> {
    return this.#invoke('chmod', [path], () => this.#inner.chmod(path, permissions));
  }

  readFile(path: string): Promise<Uint8Array> {
    return this.#invoke('readFile', [path], () => this.#inner.readFile(path));
  }

  readdir(path: string): Promise<DirEntry[]> {
    return this.#invoke('readdir', [path], () => this.#inner.readdir(path));
  }

  lstat(path: string): Promise<FileInfo> {
    return this.#invoke('lstat', [path], () => this.#inner.lstat(path));
  }

  syncDir(path: string): Promise<void> {
    return this.#invoke('syncDir', [path], () => this.#inner.syncDir(path));
  }

  #wrap(inner: FileHandle): FileHandle {
    const path = inner.path;
    let nextWriteFails: FaultRule | undefined;
    const write = async (bytes: Uint8Array): Promise<number> => {
      const pending = nextWriteFails;
      nextWriteFails = undefined;
      if (pending !== undefined) throw injectedError(pending.code ?? 'ENOSPC', 'write', path);
      const short = Math.min(bytes.byteLength, this.#maxWriteBytes);
      return inner.write(bytes.subarray(0, short));
    };
    return {
      path,
      write: (bytes) =>
        this.#invoke(
          'write',
          [path],
          () => write(bytes),
          (rule) => {
            nextWriteFails = rule;
            return inner.write(bytes.subarray(0, Math.min(bytes.byteLength, rule.partialBytes ?? 0)));
          },
        ),
      sync: () => this.#invoke('sync', [path], () => inner.sync()),
      truncate: (sizeBytes) => this.#invoke('truncate', [path], () => inner.truncate(sizeBytes)),
      close: () => this.#invoke('close', [path], () => inner.close()),
    };
  }

  #firing(op: FsOperation, paths: readonly string[]): FaultRule | undefined {
    let fired: FaultRule | undefined;
    for (const armed of this.#rules) {
      if (armed.rule.op !== op || !matches(armed.rule.path, paths)) continue;
      armed.seen += 1;
      const nth = armed.rule.nth ?? 1;
      if (fired === undefined && armed.seen >= nth && armed.seen < nth + (armed.rule.times ?? 1))
        fired = armed.rule;
    }
    return fired;
  }

  async #invoke<T>(
    op: FsOperation,
    paths: readonly string[],
    call: () => Promise<T>,
    partial?: (rule: FaultRule) => Promise<T>,
  ): Promise<T> {
    this.calls.push({ op, paths });
    const rule = this.#firing(op, paths);
    const fault = rule === undefined ? undefined : injectedError(rule.code ?? 'EIO', op, paths.join(' -> '));
    const inFlight = (this.#inFlight.get(op) ?? 0) + 1;
    this.#inFlight.set(op, inFlight);
    this.#maxInFlight.set(op, Math.max(inFlight, this.maxInFlight(op)));
    try {
      if (rule?.when === 'partial' && partial !== undefined) return await partial(rule);
      if (fault !== undefined && rule?.when !== 'after') throw fault;
      const result = await call();
      if (fault !== undefined) throw fault;
      return result;
    } finally {
      this.#inFlight.set(op, (this.#inFlight.get(op) ?? 1) - 1);
    }
  }
}
