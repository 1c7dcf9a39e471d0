import { createHash } from 'node:crypto';
import { mkdir, rm } from 'node:fs/promises';
import { homedir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import type { DockerContainerRuntime } from './adapters/docker/docker-container-runtime.js';
import { EvidenceStore } from './app/evidence/evidence-store.js';
import { NodeFileSystem } from './adapters/fs/node-file-system.js';
import { isRegistryUnavailable } from './app/serve/api-error.js';
import { RoboguideError } from './core/errors.js';
import { ServeMetrics } from './adapters/http/serve-metrics.js';
import { instrumentRegistry } from './adapters/metrics/instrumented-registry.js';
import { claimDataDir, claimSocketFolder } from './adapters/http/socket-folder.js';
import { isPostgresLocation, registryFilePath, registryLocation } from './adapters/registry/default-path.js';
import { openRegistryAt } from './adapters/registry/open-registry.js';
import { registryWorkerFile, WorkerCapacityRegistry } from './adapters/registry/worker-registry.js';
import { engineSocketPaths } from './adapters/host-addresses.js';
import type { CapacityRegistry } from './app/ports/capacity-registry.js';
import type { PairService } from './app/serve/pair-service.js';
import type { SessionManager } from './app/serve/session-manager.js';
import type { SessionManagerDeps } from './app/serve/session-state.js';
import { createDockerRuntime } from './composition-root.js';
import { hostMountRules } from './mount-wiring.js';
import type { ServeOptions } from './serve-options.js';

/**
 * The host side of `roboguide-eval serve`'s start (part of its composition root, src/serve-root.ts): the socket's
 * folder, the engine, the data directory, the registry (timed for GET /metrics), and the paths no mount may reach.
 */

function stateHome(env: Readonly<Record<string, string | undefined>>): string {
  const xdg = env['XDG_STATE_HOME'];
  return xdg !== undefined && isAbsolute(xdg) ? xdg : join(homedir(), '.local', 'state');
}

export function defaultSocketPath(env: Readonly<Record<string, string | undefined>> = process.env): string {
  const runtimeDir = env['XDG_RUNTIME_DIR'];
  if (runtimeDir !== undefined && isAbsolute(runtimeDir))
    return join(runtimeDir, 'roboguide-eval', 'api.sock');
  return join(stateHome(env), 'roboguide-eval', 'api.sock');
}

export function defaultDataDir(env: Readonly<Record<string, string | undefined>> = process.env): string {
  return join(stateHome(env), 'roboguide-eval', 'serve');
}

/** The data directory (private, made if needed; its canonical path) and its scratch folder, emptied at each start. */
async function prepareDataDir(options: ServeOptions): Promise<{ dataDir: string; tempRoot: string }> {
  // Reached without a link, ours, writable by no one else: the path is then canonical and stays ours.
  const dataDir = await claimDataDir(options.dataDir ?? defaultDataDir(options.environment));
  const tempRoot = join(dataDir, 'tmp');
  await rm(tempRoot, { recursive: true, force: true });
  await mkdir(tempRoot, { mode: 0o700 });
  return { dataDir, tempRoot };
}

/** Closes the registry when `work` fails (the server never started), and passes the failure on. */
export async function closingOnFailure<T>(registry: CapacityRegistry, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    await registry.close();
    throw err;
  }
}

/** The same rules as every command: a URL is refused, a named registry must exist (or be new in an existing folder). */
async function openServeRegistry(
  options: ServeOptions,
): Promise<{ registry: CapacityRegistry; registryPath: string | undefined }> {
  const location = registryLocation(options.registryPath, options.environment);
  // SQLite in a worker thread of its own: its synchronous writes, fsyncs and lock waits stay off the event loop.
  const workerFile = isPostgresLocation(location) ? null : registryWorkerFile();
  const registry =
    isPostgresLocation(location) || workerFile === null
      ? await openRegistryAt(location)
      : await WorkerCapacityRegistry.open(location, workerFile);
  return { registry, registryPath: registryFilePath(location) };
}

/**
 * A registry that cannot be reached at start: the error with serve's own next step (the registry layer's advice names
 * `e1-batch resume`, which is about batches).
 */
export async function servesOwnAdvice<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (!(err instanceof RoboguideError) || !isRegistryUnavailable(err)) throw err;
    throw new RoboguideError(err.code, err.message, {
      cause: err,
      context: err.context,
      exitCode: err.exitCode,
      suggestions: [
        'start the registry (or restore the network to it), then start `serve` again',
        'check --registry; ROBOGUIDE_REGISTRY_DEADLINE_MS sets how long a registry call may wait',
      ],
    });
  }
}

/** The live objects that GET /metrics and the log's masking read; each is set once it is made. */
export interface Live {
  sessions: SessionManager | null;
  pairs: PairService | null;
}

/** The host side of a start: the socket's folder, the engine, the data directory, the registry timed for /metrics. */
export interface Base {
  readonly socketPath: string;
  readonly runtime: DockerContainerRuntime;
  readonly dataDir: string;
  readonly tempRoot: string;
  readonly registry: CapacityRegistry;
  readonly registryPath: string | undefined;
  readonly metrics: ServeMetrics;
  readonly store: EvidenceStore;
  readonly batchId: string;
}

export async function openBase(options: ServeOptions, live: Live): Promise<Base> {
  // Before anything is made: a socket folder another user could use to take the socket over is refused (exit 2).
  const socketPath = await claimSocketFolder(options.socketPath ?? defaultSocketPath(options.environment));
  // First: an invalid ROBOGUIDE_PAIRS_NETWORK is refused before anything is written.
  const runtime = options.runtime ?? (await createDockerRuntime(options.environment));
  const { dataDir, tempRoot } = await prepareDataDir(options);
  const opened = await servesOwnAdvice(() => openServeRegistry(options));
  // GET /metrics (issue 45): every registry call of this process timed, the live sessions and pairs counted.
  const metrics = new ServeMetrics({
    sessions: () => live.sessions?.list().length ?? 0,
    pairs: () => live.pairs?.runningCount() ?? 0,
  });
  return {
    socketPath,
    runtime,
    dataDir,
    tempRoot,
    registry: instrumentRegistry(opened.registry, metrics.registryCalls),
    registryPath: opened.registryPath,
    metrics,
    store: new EvidenceStore(new NodeFileSystem(), dataDir),
    batchId: `serve-${createHash('sha256').update(dataDir).digest('hex').slice(0, 12)}`,
  };
}

/** What no session mount or pair cwd may reach, and the roots they must lie under. */
export async function protectedPathsOf(
  options: ServeOptions,
  base: Base,
): Promise<SessionManagerDeps['protectedPaths']> {
  const host = await hostMountRules(base.runtime, [base.dataDir, ...(options.ownedDirs ?? [])]);
  return {
    ...host,
    outputDir: base.dataDir,
    ...(base.registryPath !== undefined ? { registryPath: base.registryPath } : {}),
    homeDir: homedir(),
    engineSocketPaths: [...engineSocketPaths(options.environment), base.socketPath],
    ...(options.mountRoots !== undefined && options.mountRoots.length > 0
      ? { mountRoots: options.mountRoots }
      : {}),
  };
}
