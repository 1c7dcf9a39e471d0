import { spawn, type ChildProcess } from 'node:child_process';
import { realpath } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import {
  mountOf,
  type CpuFact,
  type FileSystemFact,
  type GpuController,
  type MemoryFact,
  type MountFact,
  type OsFact,
} from '../../core/host-facts.js';
import type { HostFactsSource } from '../../app/ports/host-facts.js';
import { procFileSystemOf, procMemory } from './proc-dynamic-facts.js';
import { controllersFromSi, cpuFromSi, memoryFromSi, mountsFromSi, osFromSi } from './si-shapes.js';
import { StaticFactsCache, type StaticFacts } from './static-facts-cache.js';
import { defaultRegistryPath } from '../registry/default-path.js';
import { readBootId } from '../host-identity.js';
import { InternalError } from '../../core/errors.js';

/** The source `doctor` and `e1-batch start` use: static facts cached per boot beside the default registry. */
export function defaultHostFactsSource(): SystemInformationHostFacts {
  const cacheFile = join(dirname(defaultRegistryPath()), 'host-facts.json');
  return new SystemInformationHostFacts({ cache: new StaticFactsCache(cacheFile, readBootId) });
}

/** The facts a child asks systeminformation for. */
type FactName = 'cpu' | 'memory' | 'os' | 'fileSystems' | 'gpuControllers';

/**
 * Runs in a separate Node process (CommonJS, `node -e`), given the module path and the facts to ask for:
 * systeminformation shells out (lscpu, df, lspci) and some of its calls are synchronous (nvidia-smi inside
 * `graphics()`, `hostname -f` inside `osInfo()`), so in this process a hung command could block the event loop past
 * any timeout. Each fact is printed as one JSON line as soon as it is known.
 */
const CHILD_SOURCE = `
const si = require(process.argv[1]);
const calls = {
  memory: () => si.mem(),
  fileSystems: () => si.fsSize(),
  cpu: () => si.cpu(),
  os: () => si.osInfo(),
  gpuControllers: () => si.graphics().then((g) => g.controllers),
};
// One call per turn of the event loop: an answer already there is written before the next call can block.
(async () => {
  for (const fact of process.argv.slice(2)) {
    await new Promise((resolve) => setImmediate(resolve));
    Promise.resolve().then(calls[fact]).then(
      (value) => ({ fact, value }),
      (err) => ({ fact, error: String((err && err.message) || err) }),
    ).then((line) => process.stdout.write(JSON.stringify(line) + '\\n'));
  }
})();
`;

/**
 * The facts in two processes (on Linux the first group is read in this process instead: `dynamic`): those that
 * change while the machine runs (cheap: /proc/meminfo, df), and the static
 * ones, asked once per boot when a cache is given, whose calls hold most commands and the synchronous ones (a hung
 * `hostname -f` or nvidia-smi then blocks only its own group).
 */
const GROUPS: readonly (readonly FactName[])[] = [
  ['memory', 'fileSystems'],
  ['cpu', 'os', 'gpuControllers'],
];

/** Past this the child (and what it started) is killed: the process never outlives its answers for long. */
export const CHILD_DEADLINE_MS = 6_000;

interface Pending {
  readonly promise: Promise<unknown>;
  resolve(value: unknown): void;
  reject(err: Error): void;
}

/**
 * Host facts from `systeminformation` (https://systeminformation.io), loaded lazily in a child process on the first
 * call; every later call is answered from the same child. The port's callers bound each call in time; this adapter
 * also kills the child's process group at `deadlineMs` so a hung command never keeps the tool alive.
 */
export class SystemInformationHostFacts implements HostFactsSource {
  readonly #deadlineMs: number;
  readonly #modulePath: string;
  readonly #cache: StaticFactsCache | null;
  readonly #dynamic: 'proc' | 'child';
  readonly #facts = new Map<FactName, Pending>();

  constructor(
    options: {
      readonly deadlineMs?: number;
      readonly modulePath?: string;
      readonly cache?: StaticFactsCache | null;
      /**
       * Where memory and file systems come from: `proc` (Linux, the default there) reads the kernel's files in this
       * process (proc-dynamic-facts.ts); `child` asks systeminformation in its child, as every fact elsewhere.
       */
      readonly dynamic?: 'proc' | 'child';
    } = {},
  ) {
    this.#dynamic = options.dynamic ?? (process.platform === 'linux' ? 'proc' : 'child');
    this.#deadlineMs = options.deadlineMs ?? CHILD_DEADLINE_MS;
    this.#modulePath = options.modulePath ?? createRequire(import.meta.url).resolve('systeminformation');
    this.#cache = options.cache ?? null;
  }

  cpu(): Promise<CpuFact> {
    return this.#static('cpu', async () => cpuFromSi(await this.#fact('cpu')));
  }

  async memory(): Promise<MemoryFact> {
    if (this.#dynamic === 'proc') return procMemory();
    return memoryFromSi(await this.#fact('memory'));
  }

  os(): Promise<OsFact> {
    return this.#static('os', async () => osFromSi(await this.#fact('os')));
  }

  gpuControllers(): Promise<readonly GpuController[]> {
    return this.#static('gpuControllers', async () => controllersFromSi(await this.#fact('gpuControllers')));
  }

  /** A static fact from this boot's cache, else asked (and remembered once known). */
  async #static<K extends keyof StaticFacts>(
    key: K,
    ask: () => Promise<NonNullable<StaticFacts[K]>>,
  ): Promise<NonNullable<StaticFacts[K]>> {
    const hit = await this.#cache?.get(key);
    if (hit !== undefined) return hit;
    const value = await ask();
    void this.#cache?.remember(key, value);
    return value;
  }

  async fileSystemOf(path: string, options: { readonly nearestAncestor: boolean }): Promise<FileSystemFact> {
    if (this.#dynamic === 'proc') {
      const real = options.nearestAncestor ? await realNearest(path) : await realpath(path);
      return { path, ...(await procFileSystemOf(real)) };
    }
    const mounts = this.#fact('fileSystems').then(mountsFromSi);
    mounts.catch(() => undefined); // awaited below; a realpath failure must not leave it unhandled
    const real = options.nearestAncestor ? await realNearest(path) : await realpath(path);
    const mount: MountFact | null = mountOf(real, await mounts);
    if (mount === null) throw new InternalError(`no listed file system holds ${real}`);
    return { path, ...mount };
  }

  #fact(name: FactName): Promise<unknown> {
    if (!this.#facts.has(name)) this.#spawn(GROUPS.find((g) => g.includes(name)) ?? [name]);
    return (this.#facts.get(name) as Pending).promise;
  }

  /** One child asking for `group`; its answers settle the group's facts. */
  #spawn(group: readonly FactName[]): void {
    const facts = new Map<FactName, Pending>(group.map((name) => [name, deferred()]));
    for (const [name, pending] of facts) this.#facts.set(name, pending);
    let child: ChildProcess;
    try {
      child = spawn(process.execPath, ['-e', CHILD_SOURCE, this.#modulePath, ...group], {
        stdio: ['ignore', 'pipe', 'ignore'],
        detached: true, // its own process group: killed with what it started (lspci, df, nvidia-smi)
        env: { ...process.env, NODE_OPTIONS: '' },
      });
    } catch (err) {
      for (const p of facts.values()) p.reject(err as Error);
      return;
    }
    const timer = setTimeout(() => killGroup(child), this.#deadlineMs);
    let buffered = '';
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      const lines = buffered.split('\n');
      buffered = lines.pop() ?? '';
      for (const line of lines) settleLine(facts, line);
    });
    child.on('error', (err) => {
      for (const p of facts.values()) p.reject(err);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const why =
        signal === 'SIGKILL'
          ? `no answer within ${this.#deadlineMs} ms (killed)`
          : `exited ${signal ?? code} without answering`;
      for (const p of facts.values()) p.reject(new InternalError(`systeminformation ${why}`));
    });
  }
}

function settleLine(facts: Map<FactName, Pending>, line: string): void {
  let parsed: { fact?: unknown; value?: unknown; error?: unknown };
  try {
    parsed = JSON.parse(line) as typeof parsed;
  } catch {
    return;
  }
  const pending = facts.get(parsed.fact as FactName);
  if (pending === undefined) return;
  if (typeof parsed.error === 'string') pending.reject(new InternalError(parsed.error));
  else pending.resolve(parsed.value);
}

function killGroup(child: ChildProcess): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, 'SIGKILL');
  } catch {
    child.kill('SIGKILL');
  }
}

function deferred(): Pending {
  let resolve!: (value: unknown) => void;
  let reject!: (err: Error) => void;
  const promise = new Promise<unknown>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => undefined); // a fact nobody asked for may fail unobserved
  return { promise, resolve, reject };
}

/** The real path of `path`, or of its nearest existing ancestor. */
async function realNearest(path: string): Promise<string> {
  let current = path;
  for (;;) {
    try {
      return await realpath(current);
    } catch (err) {
      const parent = dirname(current);
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || parent === current) throw err;
      current = parent;
    }
  }
}
