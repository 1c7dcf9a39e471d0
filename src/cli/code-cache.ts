import type * as Crypto from 'node:crypto';
import type * as Fs from 'node:fs';
import type * as Path from 'node:path';
import type * as Vm from 'node:vm';
import type { Script } from 'node:vm';

/**
 * V8's compiled code of the bundle (dist/bundle/, CommonJS), kept after a run instead of at compile time (issue 39).
 *
 * Node's own compile cache stores a module's code as V8 has it right after compiling the file, when only its top level
 * is compiled: every function a command calls is compiled again at every start. On a `pair run` that was about 1,800
 * functions (parsed and made bytecode, 50 to 100 ms of the main thread on the 2-core machine). Here each bundle file
 * is compiled as Node would compile it (the same wrapper, `vm.Script`) with the cached data of an earlier run of the
 * same command, and at the end of a run that succeeded the data is made again for any file that had none or whose
 * data V8 refused: then it holds what that run compiled (V8 keeps the bytecode of every function compiled so far).
 *
 * One cache file per command (its first two words, `pair run`) and bundle file, so that `--help` never leaves a
 * `pair run` with the help's few functions. A file holds the SHA-1 of the source it was made from (V8's own check
 * compares only the length) and of its data (V8 does not check that, and would run damaged data); another source
 * (a new build) is compiled afresh and its file replaced. V8 checks its own version and flags, and refuses the rest.
 * The folder is private to the user (0700, never a link, no one else's), in a folder that is the user's and that no
 * one else can write (Node's own compile cache folder, whatever NODE_COMPILE_CACHE names); nothing here ever throws
 * into the command: any failure is a compile without a cache.
 */

interface CompiledModule {
  exports: unknown;
  require(id: string): unknown;
}

interface ModuleStatics {
  prototype: {
    _compile: (this: CompiledModule, content: string, filename: string, ...rest: unknown[]) => unknown;
  };
  _resolveFilename(request: string, parent: unknown, isMain: boolean, options?: unknown): string;
  _resolveLookupPaths(request: string, parent: unknown): string[] | null;
  _extensions: NodeJS.RequireExtensions;
  _cache: NodeJS.Dict<NodeJS.Module>;
}

/** The cached data of one file, once read or once made. */
interface Entry {
  readonly script: Script;
  readonly file: string;
  readonly sourceHash: Buffer;
  readonly dataHash: (data: Buffer) => Buffer;
}

export interface CodeCacheOptions {
  /** The folder whose CommonJS files are compiled with a cache (dist/bundle/, with its trailing separator). */
  readonly bundleDir: string;
  /** Where the cache files go: made 0700 when missing; refused when a link, another user's, or open to others. */
  readonly cacheDir: string;
  /** The command (its words joined by `-`): each command has its own cache files. */
  readonly key: string;
}

export interface CodeCache {
  /** Writes the cache of every file compiled without usable data; at exit, or by a test. */
  flush(): void;
  /** Files compiled so far with data V8 accepted, and without. */
  readonly stats: { hits: number; misses: number };
}

/** Nothing larger is read as cached data (the bundle's are a few MB at most). */
const MAX_CACHE_BYTES = 64 * 1024 * 1024;
const HASH_BYTES = 20;
const KEY = /^[a-z0-9][a-z0-9-]{0,63}$/;
const WRAPPER_HEAD = '(function (exports, require, module, __filename, __dirname) { ';
const WRAPPER_TAIL = '\n});';

const builtin = <T>(id: string): T => process.getBuiltinModule(id) as T;

/**
 * The command's key for its cache files: the first two words of `argv` that are command words (lowercase, digits
 * and `-`), joined by `-`; null when the first is none (a flag, a path, a typo in capitals), and then nothing is cached.
 */
export function commandKey(argv: readonly string[]): string | null {
  const words: string[] = [];
  for (const arg of argv.slice(0, 2)) {
    if (!KEY.test(arg)) break;
    words.push(arg);
  }
  return words.length === 0 ? null : words.join('-');
}

/**
 * Compiles every CommonJS file under `bundleDir` with its command's cached data from now on, and writes the missing
 * data at the exit of a run that succeeded (exit code 0). Null, with nothing changed, where the cache folder cannot be
 * used.
 */
export function installCodeCache(options: CodeCacheOptions): CodeCache | null {
  const fs = builtin<typeof Fs>('node:fs');
  const path = builtin<typeof Path>('node:path');
  const vm = builtin<typeof Vm>('node:vm');
  const crypto = builtin<typeof Crypto>('node:crypto');
  const Module = builtin<ModuleStatics>('node:module');
  if (!KEY.test(options.key) || !noOneElseCanChange(fs, path, path.dirname(options.cacheDir))) return null;
  if (!privateFolder(fs, options.cacheDir)) return null;

  const pending: Entry[] = [];
  const stats = { hits: 0, misses: 0 };
  const original = Module.prototype._compile;
  Module.prototype._compile = function compile(content, filename, ...rest) {
    if (!filename.startsWith(options.bundleDir) || !filename.endsWith('.cjs')) {
      return original.call(this, content, filename, ...rest);
    }
    const sourceHash = crypto.hash('sha1', content, 'buffer');
    const file = path.join(
      options.cacheDir,
      `${options.key}.${cacheName(crypto, options.bundleDir, filename)}`,
    );
    const cachedData = readCache(fs, crypto, file, sourceHash);
    const script = new vm.Script(`${WRAPPER_HEAD}${content}${WRAPPER_TAIL}`, {
      filename,
      ...(cachedData !== null ? { cachedData } : {}),
      importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
    });
    if (cachedData === null || script.cachedDataRejected === true) {
      stats.misses += 1;
      pending.push({ script, file, sourceHash, dataHash: (data) => crypto.hash('sha1', data, 'buffer') });
    } else {
      stats.hits += 1;
    }
    const wrapper = script.runInThisContext({ displayErrors: true }) as (...args: unknown[]) => unknown;
    return wrapper.call(this.exports, this.exports, requireOf(this), this, filename, path.dirname(filename));
  };
  /** The `require` a module's code is given, as Node makes it: by the module, resolved from its place. */
  const requireOf = (mod: CompiledModule): NodeJS.Require =>
    Object.assign((id: string) => mod.require(id), {
      resolve: Object.assign(
        (request: string, resolveOptions?: { paths?: string[] }) =>
          Module._resolveFilename(request, mod, false, resolveOptions),
        { paths: (request: string) => Module._resolveLookupPaths(request, mod) },
      ),
      main: (process as { mainModule?: NodeJS.Module }).mainModule,
      extensions: Module._extensions,
      cache: Module._cache,
    }) as NodeJS.Require;

  const flush = (): void => {
    for (const entry of pending.splice(0)) writeCache(fs, entry);
  };
  process.once('exit', (code) => {
    if (code === 0) flush();
  });
  return { flush, stats };
}

/**
 * True when no other user can change what `dir` holds or where its path leads: on its real path, from `/` down, every
 * folder is root's or this user's, and one that others may write is either sticky (they cannot rename what is not
 * theirs: /tmp) or inside a folder of ours or root's that they cannot enter (Node's version folder under umask 002,
 * inside our 0700 cache folder). A shared NODE_COMPILE_CACHE of another user's fails here: its owner could swap a
 * folder of ours in it for a link between our check and our read.
 */
function noOneElseCanChange(fs: typeof Fs, path: typeof Path, dir: string): boolean {
  const euid = process.geteuid?.() ?? -1;
  let real: string;
  try {
    real = fs.realpathSync.native(dir);
  } catch {
    return false;
  }
  let sealed = false;
  let at = '/';
  for (const part of ['', ...real.split(path.sep).filter((p) => p !== '')]) {
    at = path.join(at, part);
    let info: Fs.Stats;
    try {
      info = fs.lstatSync(at);
    } catch {
      return false;
    }
    if (!info.isDirectory() || (info.uid !== 0 && info.uid !== euid)) return false;
    const othersWrite = (info.mode & 0o022) !== 0;
    if (othersWrite && !sealed && (info.mode & 0o1000) === 0) return false;
    if ((info.mode & 0o011) === 0) sealed = true;
  }
  return true;
}

/**
 * A bundle file's cache name: its path under the bundle without the content hash rolldown puts in a chunk's name
 * (`chunks/oclif-eg_8V3MC.cjs` → `chunks/oclif.cjs`), hashed: a new build's file replaces the old build's.
 */
function cacheName(crypto: typeof Crypto, bundleDir: string, filename: string): string {
  const relative = filename.slice(bundleDir.length).replace(/^(chunks\/.+)-[\w-]{8}\.cjs$/, '$1.cjs');
  return crypto.hash('sha1', relative).slice(0, 16);
}

/** The folder, made 0700 when missing: true only when it is a folder of this user that no one else can write. */
function privateFolder(fs: typeof Fs, dir: string): boolean {
  try {
    fs.mkdirSync(dir, { mode: 0o700 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') return false;
  }
  try {
    const info = fs.lstatSync(dir);
    return info.isDirectory() && info.uid === (process.geteuid?.() ?? -1) && (info.mode & 0o077) === 0;
  } catch {
    return false;
  }
}

/**
 * The cached data in `file` when it was made from this source and is whole; null otherwise (none, another build, a
 * file cut short or damaged, unreadable). V8 itself does not check its data's checksum: damaged data it would run.
 */
function readCache(fs: typeof Fs, crypto: typeof Crypto, file: string, sourceHash: Buffer): Buffer | null {
  let fd: number;
  try {
    // Never a link, never a FIFO's wait.
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch {
    return null;
  }
  try {
    const info = fs.fstatSync(fd);
    if (!info.isFile() || info.size <= 2 * HASH_BYTES || info.size > MAX_CACHE_BYTES) return null;
    const bytes = Buffer.allocUnsafe(info.size);
    let read = 0;
    while (read < bytes.length) {
      const n = fs.readSync(fd, bytes, read, bytes.length - read, read);
      if (n === 0) return null;
      read += n;
    }
    if (!bytes.subarray(0, HASH_BYTES).equals(sourceHash)) return null;
    const data = bytes.subarray(2 * HASH_BYTES);
    if (!crypto.hash('sha1', data, 'buffer').equals(bytes.subarray(HASH_BYTES, 2 * HASH_BYTES))) return null;
    return data;
  } catch {
    return null;
  } finally {
    fs.closeSync(fd);
  }
}

/** The script's data now (every function compiled so far), after its source's hash; replaced whole, never half-written. */
function writeCache(fs: typeof Fs, entry: Entry): void {
  const tmp = `${entry.file}.${process.pid}.tmp`;
  try {
    const data = entry.script.createCachedData();
    const dataHash = entry.dataHash(data);
    fs.writeFileSync(tmp, Buffer.concat([entry.sourceHash, dataHash, data]), { mode: 0o600, flag: 'wx' });
    fs.renameSync(tmp, entry.file);
  } catch {
    try {
      fs.unlinkSync(tmp);
    } catch {
      // nothing was made
    }
  }
}
