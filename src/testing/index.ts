/**
 * `roboguide-eval/testing`: a test kit for TypeScript suites that use roboguide-eval as their execution backend.
 * Framework-agnostic (assertions throw plain Errors), real parts only: the real engine, the real server process.
 */
// First: on an older Node this refuses with what to do, before anything below needs Node 24.
import './require-node-24.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import Docker from 'dockerode';
import { DockerContainerRuntime } from '../adapters/docker/docker-container-runtime.js';
import { buildSyntheticImages, PAIR_DRIVER_IMAGE } from '../adapters/docker/image-builder.js';
import { ApiClient } from './api-client.js';

export {
  ApiCallError,
  ApiClient,
  type ApiClientOptions,
  type ApiResponse,
  type RequestOptions,
} from './api-client.js';
export { PAIR_DRIVER_IMAGE };

const PACKAGE_ROOT = fileURLToPath(new URL('../..', import.meta.url));
const BIN = join(PACKAGE_ROOT, 'bin', 'run.js');

/** Build the synthetic pair-driver image (FROM scratch + the host's static busybox; no network, no pull). */
export async function buildPairDriverImage(options: { docker?: Docker; busyboxPath?: string } = {}): Promise<string> {
  await buildSyntheticImages(options.docker ?? new Docker(), {
    dockerDir: join(PACKAGE_ROOT, 'docker'),
    busyboxPath: options.busyboxPath ?? '/bin/busybox',
    only: ['pair-driver'],
  });
  return PAIR_DRIVER_IMAGE;
}

/** Containers carrying every given label (`{key: ''}` matches the key with any value). */
export async function containersLabelled(labels: Readonly<Record<string, string>>, runtime = new DockerContainerRuntime()): Promise<string[]> {
  return (await runtime.listByLabel(labels)).map((c) => c.id);
}

/**
 * Throws when a container with these labels still exists. It removes them first (so one failure does not spill
 * into the next test) and names them in the error.
 */
export async function expectNoContainersLeft(labels: Readonly<Record<string, string>> | string): Promise<void> {
  const wanted = typeof labels === 'string' ? { [labels.split('=')[0] ?? labels]: labels.includes('=') ? labels.slice(labels.indexOf('=') + 1) : '' } : labels;
  const runtime = new DockerContainerRuntime();
  const left = await containersLabelled(wanted, runtime);
  await Promise.all(left.map((id) => runtime.remove(id)));
  if (left.length > 0) throw new Error(`containers left with labels ${JSON.stringify(wanted)}: ${left.join(', ')}`);
}

export interface FakeCodexSessionOptions {
  /** A provider failure to record (the last event of the session), e.g. `{ httpStatus: 429 }`. */
  readonly failure?: { readonly httpStatus: number; readonly kind?: string };
  readonly lines?: readonly unknown[];
  readonly mtime?: Date;
}

/** Write a Codex session file (`rollout-*.jsonl`, one JSON event a line) under `dir/YYYY/MM/DD/`; returns its path. */
export async function writeFakeCodexSession(dir: string, options: FakeCodexSessionOptions = {}): Promise<string> {
  const when = options.mtime ?? new Date();
  const day = join(dir, String(when.getUTCFullYear()), String(when.getUTCMonth() + 1).padStart(2, '0'), String(when.getUTCDate()).padStart(2, '0'));
  await mkdir(day, { recursive: true });
  const lines: unknown[] = [
    { type: 'session_meta', payload: { id: 'fake', cwd: '/work' } },
    { type: 'response_item', payload: { type: 'message', role: 'assistant' } },
    ...(options.lines ?? []),
  ];
  if (options.failure) {
    const kind = options.failure.kind ?? 'response_too_many_failed_attempts';
    lines.push({ type: 'event_msg', payload: { type: 'error', message: 'provider error', codex_error_info: { [kind]: { http_status_code: options.failure.httpStatus } } } });
  }
  const path = join(day, `rollout-${when.toISOString().replace(/[:.]/g, '-')}.jsonl`);
  await writeFile(path, `${lines.map((l) => JSON.stringify(l)).join('\n')}\n`);
  await utimes(path, when, when);
  return path;
}

export interface TestServerOptions {
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

export interface TestServer {
  readonly workDir: string;
  readonly socketPath: string;
  readonly dataDir: string;
  readonly registryPath: string;
  readonly client: ApiClient;
  readonly process: ChildProcess;
  /** The server's first stdout line: what it adopted, reaped and released at start. */
  readonly started: {
    adopted: string[];
    reaped: string[];
    released_slots: string[];
    foreign: { container_id: string; session_id: string; reason: string }[];
    tcp_port: number | null;
    listening: string;
  };
  /** The server's stderr so far (its last 64 KiB): logs, shutdown messages. */
  stderr(): string;
  /** Send a signal (default SIGTERM) and wait for the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  /** Stop it if running and delete its temporary folder. */
  dispose(): Promise<void>;
}

/** Start `roboguide-eval serve` as a real process on a temporary socket, data dir and registry. */
export async function startTestServer(options: TestServerOptions = {}): Promise<TestServer> {
  const workDir = options.workDir ?? (await mkdtemp(join(tmpdir(), 'rg-serve-')));
  const socketPath = join(workDir, 'api.sock');
  const dataDir = join(workDir, 'data');
  const registryPath = join(workDir, 'registry.db');
  if (options.registry === undefined) {
    // Loaded here, not at import: node:sqlite exists on Node 24 only (require-node-24.ts refuses older ones first).
    const { SqliteCapacityRegistry } = await import('../adapters/registry/sqlite-capacity-registry.js');
    const registry = SqliteCapacityRegistry.open({ path: registryPath });
    await registry.setLimits({ maxReservations: options.maxReservations ?? 100, gpuMib: null });
    await registry.close();
  }
  const child = spawn(
    process.execPath,
    [
      BIN, 'serve', '--socket', socketPath, '--data-dir', dataDir, '--registry', options.registry ?? registryPath, '--reap-interval', String(options.reapIntervalSec ?? 5),
      ...(options.allowEnv ?? Object.keys(options.env ?? {})).flatMap((name) => ['--allow-env', name]),
      ...(options.extraArgs ?? []),
    ],
    { env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', HOME: process.env['HOME'] ?? workDir, ...(process.env['DOCKER_HOST'] ? { DOCKER_HOST: process.env['DOCKER_HOST'] } : {}), ...(process.env['ROBOGUIDE_PAIRS_NETWORK'] ? { ROBOGUIDE_PAIRS_NETWORK: process.env['ROBOGUIDE_PAIRS_NETWORK'] } : {}), ...options.env }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => { stderr = (stderr + d.toString()).slice(-65_536); });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const lines = createInterface({ input: child.stdout });
  const first = await Promise.race([
    new Promise<string>((resolve) => lines.once('line', resolve)),
    exited.then((code) => { throw new Error(`serve exited (${code}) before listening: ${stderr}`); }),
  ]);
  const started = JSON.parse(first) as TestServer['started'];
  const stop = async (signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    return exited;
  };
  return {
    workDir,
    socketPath,
    dataDir,
    registryPath,
    client: new ApiClient(socketPath, { mode: options.clientMode ?? 'throw' }),
    process: child,
    started,
    stderr: () => stderr,
    stop,
    dispose: async () => {
      await stop('SIGTERM');
      if (options.workDir === undefined) await rm(workDir, { recursive: true, force: true });
    },
  };
}
