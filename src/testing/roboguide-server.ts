/**
 * `RoboguideServer`: the real `roboguide-eval serve` process on a temporary socket, data directory and registry,
 * in testcontainers' shape: configure with `with…()`, `start()` → `StartedRoboguideServer` (its `client`),
 * `stop()` (or `await using`). Recorded on disk while it runs, so the kit's sweep ends it and removes its
 * containers when the suite that started it was killed.
 */
import { spawn, type ChildProcess, type ChildProcessByStdio } from 'node:child_process';
import { mkdtemp, realpath, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { DockerContainerRuntime } from '../adapters/docker/docker-container-runtime.js';
import { readBootId, readProcessStartTicks } from '../adapters/host-identity.js';
import { ApiClient } from './api-client.js';
import { serveBatchIdOf } from './record-proof.js';
import { PACKAGE_ROOT } from './images.js';
import {
  deleteServerRecord,
  removeVerified,
  sweepOnce,
  testKitOwner,
  writeServerRecord,
  writeWorkDirMarker,
} from './leftovers.js';
import { makeDirs } from '../adapters/fs/make-dirs.js';

const BIN = join(PACKAGE_ROOT, 'bin', 'run.js');

export interface RoboguideServerOptions {
  /** Environment of the server process (`${NAME}` references resolve here); PATH and HOME are kept. */
  readonly env?: Readonly<Record<string, string>>;
  /** Names callers may reference (`serve --allow-env`); default: every name of `env`. */
  readonly allowEnv?: readonly string[];
  readonly reapIntervalSec?: number;
  /** Host reservation limit of the server's private registry (default 100). */
  readonly maxReservations?: number;
  /** Reuse the folder of an earlier server (restart tests); default: a new temporary folder. */
  readonly workDir?: string;
  /** Another registry (e.g. a PostgreSQL URL) instead of the private SQLite file (`maxReservations` is then not set). */
  readonly registry?: string;
  readonly extraArgs?: readonly string[];
  /** How `client` answers a 4xx/5xx: `throw` (default, an ApiCallError) or `raw` (returned with its status). */
  readonly clientMode?: 'throw' | 'raw';
}

/** What the server printed on its first stdout line: what it adopted, reaped and released at start. */
export interface ServerStartReport {
  adopted: string[];
  reaped: string[];
  released_slots: string[];
  foreign: { container_id: string; session_id: string; reason: string }[];
  /** Execs a killed server left running in adopted sessions, ended at this start (each in its execs.jsonl). */
  ended_execs: number;
  tcp_port: number | null;
  /** `--metrics-listen`'s port, or null (issue 45; absent from servers before it). */
  metrics_port?: number | null;
  listening: string;
  data_dir: string;
}

export interface StoppedRoboguideServer {
  /** The server's exit code (0: it deleted every session, verified, before it exited). */
  readonly exitCode: number | null;
}

export class RoboguideServer {
  #options: RoboguideServerOptions;

  constructor(options: RoboguideServerOptions = {}) {
    this.#options = { ...options };
  }

  #with(patch: RoboguideServerOptions): this {
    this.#options = { ...this.#options, ...patch };
    return this;
  }
  /** Variables of the server process; each name becomes `--allow-env` unless `withAllowedEnv` names others. */
  withEnvironment(env: Readonly<Record<string, string>>): this {
    return this.#with({ env: { ...this.#options.env, ...env } });
  }
  withAllowedEnv(names: readonly string[]): this {
    return this.#with({ allowEnv: [...names] });
  }
  withReapInterval(seconds: number): this {
    return this.#with({ reapIntervalSec: seconds });
  }
  withMaxReservations(limit: number): this {
    return this.#with({ maxReservations: limit });
  }
  withWorkDir(dir: string): this {
    return this.#with({ workDir: dir });
  }
  /** A registry URL (PostgreSQL) instead of the private SQLite file. */
  withRegistry(registry: string): this {
    return this.#with({ registry });
  }
  /** More `serve` flags, e.g. `['--max-execs', '4']`. */
  withArgs(...args: string[]): this {
    return this.#with({ extraArgs: [...(this.#options.extraArgs ?? []), ...args] });
  }
  withClientMode(mode: 'throw' | 'raw'): this {
    return this.#with({ clientMode: mode });
  }

  async start(): Promise<StartedRoboguideServer> {
    await sweepOnce();
    const options = this.#options;
    const tempWorkDir = options.workDir === undefined ? await mkdtemp(join(tmpdir(), 'rg-serve-')) : null;
    const workDir = options.workDir ?? (tempWorkDir as string);
    const paths: ServerPaths = {
      workDir,
      socketPath: join(workDir, 'api.sock'),
      dataDir: join(workDir, 'data'),
      registryPath: join(workDir, 'registry.db'),
    };
    if (options.registry === undefined)
      await seedRegistry(paths.registryPath, options.maxReservations ?? 100);
    // serve's container label: roboguide.batch = serve-<sha256(real path of the data dir)[:12]> (src/serve-root.ts).
    await makeDirs(workDir);
    // The kit's mark on its work folder: a record's sweep acts only on a folder holding this token (record-proof.ts).
    const token = await writeWorkDirMarker(workDir);
    let batchId = serveBatchIdOf(join(await realpath(workDir), 'data'));
    const child = spawnServe(options, paths);
    const record = await serverRecorder(child, { socketPath: paths.socketPath, tempWorkDir, token });
    let recordPath = await record(batchId);
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-65_536);
    });
    const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));
    let started: ServerStartReport;
    try {
      started = await firstReport(child, exited, () => stderr);
      if (typeof started.data_dir === 'string' && serveBatchIdOf(started.data_dir) !== batchId) {
        if (recordPath !== null) await deleteServerRecord(recordPath);
        batchId = serveBatchIdOf(started.data_dir);
        recordPath = await record(batchId);
      }
    } catch (err) {
      if (recordPath !== null) await deleteServerRecord(recordPath);
      if (tempWorkDir !== null) await rm(tempWorkDir, { recursive: true, force: true });
      throw err;
    }
    return new StartedRoboguideServer({
      ...paths,
      batchId,
      child,
      exited,
      started,
      stderr: () => stderr,
      recordPath,
      tempWorkDir,
      clientMode: options.clientMode ?? 'throw',
    });
  }
}

type ServeProcess = ChildProcessByStdio<null, Readable, Readable>;

interface ServerPaths {
  readonly workDir: string;
  readonly socketPath: string;
  readonly dataDir: string;
  readonly registryPath: string;
}

/** The server's private SQLite registry, made with its reservation limit before the server opens it. */
async function seedRegistry(registryPath: string, maxReservations: number): Promise<void> {
  // Loaded here, not at import: node:sqlite exists on Node 24 only (require-node-24.ts refuses older ones first).
  const { SqliteCapacityRegistry } = await import('../adapters/registry/sqlite-capacity-registry.js');
  const registry = SqliteCapacityRegistry.open({ path: registryPath });
  await registry.setLimits({ maxReservations, gpuMib: null });
  await registry.close();
}

/** `serve` on the kit's socket, data folder and registry; its environment only PATH, HOME, the engine's and `env`. */
function spawnServe(options: RoboguideServerOptions, paths: ServerPaths): ServeProcess {
  const passed = (name: string): Record<string, string> =>
    process.env[name] ? { [name]: process.env[name] } : {};
  return spawn(
    process.execPath,
    [
      BIN,
      'serve',
      '--socket',
      paths.socketPath,
      '--data-dir',
      paths.dataDir,
      '--registry',
      options.registry ?? paths.registryPath,
      '--reap-interval',
      String(options.reapIntervalSec ?? 5),
      ...(options.allowEnv ?? Object.keys(options.env ?? {})).flatMap((name) => ['--allow-env', name]),
      ...(options.extraArgs ?? []),
    ],
    {
      env: {
        PATH: process.env['PATH'] ?? '/usr/bin:/bin',
        HOME: process.env['HOME'] ?? paths.workDir,
        ...passed('DOCKER_HOST'),
        ...passed('ROBOGUIDE_PAIRS_NETWORK'),
        ...options.env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
}

/**
 * Writes the server's on-disk record under a batch id (the kit's sweep ends the process and removes the batch's
 * containers when the suite dies); null when the process never got a pid.
 */
async function serverRecorder(
  child: ChildProcess,
  where: { readonly socketPath: string; readonly tempWorkDir: string | null; readonly token: string },
): Promise<(batchId: string) => Promise<string | null>> {
  const server =
    child.pid === undefined
      ? null
      : {
          pid: child.pid,
          start_ticks: await readProcessStartTicks(child.pid),
          boot_id: await readBootId(),
        };
  return async (batchId) =>
    server === null ? null : writeServerRecord({ owner: await testKitOwner(), server, batchId, ...where });
}

/** The start report: the first line the server prints on stdout; throws with its stderr when it exits first. */
async function firstReport(
  child: ServeProcess,
  exited: Promise<number | null>,
  stderr: () => string,
): Promise<ServerStartReport> {
  const lines = createInterface({ input: child.stdout });
  const first = await Promise.race([
    new Promise<string>((done) => lines.once('line', done)),
    exited.then((code): never => {
      throw new Error(`serve exited (${code}) before listening: ${stderr()}`);
    }),
  ]);
  return JSON.parse(first) as ServerStartReport;
}

interface StartedParts {
  readonly workDir: string;
  readonly socketPath: string;
  readonly dataDir: string;
  readonly registryPath: string;
  readonly batchId: string;
  readonly child: ChildProcess;
  readonly exited: Promise<number | null>;
  readonly started: ServerStartReport;
  readonly stderr: () => string;
  readonly recordPath: string | null;
  readonly tempWorkDir: string | null;
  readonly clientMode: 'throw' | 'raw';
}

export class StartedRoboguideServer implements AsyncDisposable {
  readonly workDir: string;
  readonly socketPath: string;
  readonly dataDir: string;
  readonly registryPath: string;
  /** The `roboguide.batch` label of the server's containers. */
  readonly batchId: string;
  readonly client: ApiClient;
  readonly process: ChildProcess;
  readonly started: ServerStartReport;
  readonly #parts: StartedParts;

  constructor(parts: StartedParts) {
    this.#parts = parts;
    this.workDir = parts.workDir;
    this.socketPath = parts.socketPath;
    this.dataDir = parts.dataDir;
    this.registryPath = parts.registryPath;
    this.batchId = parts.batchId;
    this.process = parts.child;
    this.started = parts.started;
    this.client = new ApiClient(parts.socketPath, { mode: parts.clientMode });
  }

  /** The server's stderr so far (its last 64 KiB): logs, shutdown messages. */
  stderr(): string {
    return this.#parts.stderr();
  }

  /** Send a signal (default SIGTERM) and wait for the exit code; keeps the folder (restart and crash tests). */
  async kill(signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> {
    const child = this.#parts.child;
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    return this.#parts.exited;
  }

  /** Forget the server: its on-disk record and the temporary folder the kit made. */
  async release(): Promise<void> {
    if (this.#parts.recordPath !== null) await deleteServerRecord(this.#parts.recordPath);
    if (this.#parts.tempWorkDir !== null) await rm(this.#parts.tempWorkDir, { recursive: true, force: true });
  }

  /**
   * SIGTERM (the server deletes every session, verified, before it exits), then confirm that no container of this
   * server is left — any left is removed (404 confirmed) and named in the error — and delete the temporary folder.
   */
  async stop(): Promise<StoppedRoboguideServer> {
    const exitCode = await this.kill('SIGTERM');
    const runtime = new DockerContainerRuntime();
    const left = (await runtime.listByLabel({ 'roboguide.batch': this.batchId })).map((c) => c.id);
    await removeVerified(left, runtime);
    await this.release();
    if (left.length > 0)
      throw new Error(`serve (exit ${exitCode}) left containers behind: ${left.join(', ')}`);
    return { exitCode };
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}
