import { createHash } from 'node:crypto';
import { mkdir, realpath, rm } from 'node:fs/promises';
import { homedir, totalmem } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { DockerContainerRuntime } from './adapters/docker/docker-container-runtime.js';
import { DockerSessionEngine } from './adapters/docker/docker-session-engine.js';
import { EvidenceStore } from './app/evidence/evidence-store.js';
import { NodeFileSystem } from './adapters/fs/node-file-system.js';
import { startApiServer } from './adapters/http/api-server.js';
import { createRedactStream } from './adapters/redact-stream.js';
import { registryFilePath, registryLocation } from './adapters/registry/default-path.js';
import { openRegistryAt } from './adapters/registry/open-registry.js';
import { engineSocketPaths } from './adapters/host-addresses.js';
import { systemClock } from './app/ports/clock.js';
import type { CapacityRegistry } from './app/ports/capacity-registry.js';
import type { ContainerRuntime } from './app/ports/container-runtime.js';
import type { Logger } from './app/ports/logger.js';
import { PairService } from './app/serve/pair-service.js';
import { SessionManager } from './app/serve/session-manager.js';
import { createExecutePairDeps } from './composition-root.js';
import { readLimitBasis } from './adapters/limit-basis.js';
import { limitDefaults } from './core/pair-limits.js';

/** Wiring of `roboguide-eval serve` (its own composition root, so the shared one stays small). */

export interface ServeOptions {
  readonly socketPath?: string;
  readonly listen?: { readonly host: string; readonly port: number; readonly token: string };
  readonly dataDir?: string;
  readonly registryPath?: string;
  readonly bindAddress?: string;
  readonly reapIntervalMs?: number;
  readonly stopBudgetSec?: number;
  readonly maxOutputBytes?: number;
  readonly environment: Readonly<Record<string, string | undefined>>;
  readonly version: string;
  readonly logger: Logger;
  /** The engine to use (default: DOCKER_HOST or the local socket). */
  readonly runtime?: DockerContainerRuntime;
  /** Where `/v1/pairs` run (`--executor swarm`); default: `runtime`. Sessions always use `runtime`. */
  readonly pairRuntime?: ContainerRuntime;
}

export interface RunningServe {
  readonly socketPath: string;
  readonly tcpPort: number | null;
  readonly dataDir: string;
  readonly batchId: string;
  readonly adoption: { readonly adopted: string[]; readonly reaped: string[]; readonly released: string[] };
  readonly sessions: SessionManager;
  /** Stop accepting requests, delete every session (verified), stop running pairs, close the registry. */
  shutdown(): Promise<void>;
}

function stateHome(env: Readonly<Record<string, string | undefined>>): string {
  const xdg = env['XDG_STATE_HOME'];
  return xdg !== undefined && isAbsolute(xdg) ? xdg : join(homedir(), '.local', 'state');
}

export function defaultSocketPath(env: Readonly<Record<string, string | undefined>> = process.env): string {
  const runtimeDir = env['XDG_RUNTIME_DIR'];
  if (runtimeDir !== undefined && isAbsolute(runtimeDir)) return join(runtimeDir, 'roboguide-eval', 'api.sock');
  return join(stateHome(env), 'roboguide-eval', 'api.sock');
}

export function defaultDataDir(env: Readonly<Record<string, string | undefined>> = process.env): string {
  return join(stateHome(env), 'roboguide-eval', 'serve');
}

/** The data directory (private, made if needed; its canonical path) and its scratch folder, emptied at each start. */
async function prepareDataDir(options: ServeOptions): Promise<{ dataDir: string; tempRoot: string }> {
  const dataDirInput = options.dataDir ?? defaultDataDir(options.environment);
  await mkdir(dataDirInput, { recursive: true, mode: 0o700 });
  const dataDir = await realpath(dataDirInput);
  const tempRoot = join(dataDir, 'tmp');
  await rm(tempRoot, { recursive: true, force: true });
  await mkdir(tempRoot, { mode: 0o700 });
  return { dataDir, tempRoot };
}

/** Every `reapIntervalMs`, one pass over expired sessions (never two at once); returns how to stop it. */
function startReaper(sessions: SessionManager, logger: Logger, reapIntervalMs: number): () => void {
  let reaping = false;
  const reaper = setInterval(() => {
    if (reaping) return;
    reaping = true;
    sessions
      .reap()
      .catch((err: unknown) => logger.warn({ error: (err as Error).message }, 'reaper pass failed'))
      .finally(() => { reaping = false; });
  }, reapIntervalMs);
  return () => clearInterval(reaper);
}

/** Closes the registry when `work` fails (the server never started), and passes the failure on. */
async function closingOnFailure<T>(registry: CapacityRegistry, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    await registry.close();
    throw err;
  }
}

/** The same rules as every command: a URL is refused, a named registry must exist (or be new in an existing folder). */
async function openServeRegistry(options: ServeOptions): Promise<{ registry: CapacityRegistry; registryPath: string | undefined }> {
  const location = registryLocation(options.registryPath, options.environment);
  return { registry: await openRegistryAt(location), registryPath: registryFilePath(location) };
}

export async function startServe(options: ServeOptions): Promise<RunningServe> {
  const { dataDir, tempRoot } = await prepareDataDir(options);
  const { registry, registryPath } = await openServeRegistry(options);
  const runtime = options.runtime ?? new DockerContainerRuntime();
  const engine = new DockerSessionEngine(runtime);
  const store = new EvidenceStore(new NodeFileSystem(), dataDir);
  const socketPath = options.socketPath ?? defaultSocketPath(options.environment);
  const batchId = `serve-${createHash('sha256').update(dataDir).digest('hex').slice(0, 12)}`;
  const protectedPaths = { outputDir: dataDir, ...(registryPath !== undefined ? { registryPath } : {}), homeDir: homedir(), engineSocketPaths: [...engineSocketPaths(options.environment), socketPath] };
  const bindAddress = options.bindAddress ?? '127.0.0.1';
  const createRedactor = (secrets: readonly string[]) => createRedactStream(secrets);
  const sessions = new SessionManager({
    engine,
    registry,
    clock: systemClock,
    logger: options.logger,
    fs: new NodeFileSystem(),
    store,
    batchId,
    environment: options.environment,
    bindAddress,
    protectedPaths,
    createRedactor,
    stopBudgetSec: options.stopBudgetSec ?? 10,
    maxOutputBytes: options.maxOutputBytes ?? 16 * 1024 * 1024,
    // A session that asks for no limits gets a pair's defaults for one at a time (issue 22).
    limitDefaults: limitDefaults({ memoryTotalBytes: totalmem(), outputFreeBytes: null, maxConcurrentPairs: 1 }),
  });
  const adoption = await closingOnFailure(registry, () => sessions.adopt((id) => runtime.environmentOf(id)));
  const pairs = new PairService({
    pairDeps: { ...createExecutePairDeps(options.pairRuntime ?? runtime, options.logger), fs: new NodeFileSystem(), registry, limitBasis: readLimitBasis },
    store,
    environment: options.environment,
    bindAddress,
    codeVersion: options.version,
    protectedPaths,
  });
  const server = await closingOnFailure(registry, () =>
    startApiServer({ socketPath, ...(options.listen ? { listen: options.listen } : {}), version: options.version, sessions, pairs, engine, tempRoot, createRedactor, logger: options.logger }),
  );
  const stopReaper = startReaper(sessions, options.logger, options.reapIntervalMs ?? 5_000);
  let shutdown: Promise<void> | null = null;
  return {
    socketPath,
    tcpPort: server.tcpPort,
    dataDir,
    batchId,
    adoption,
    sessions,
    shutdown: () => {
      shutdown ??= (async () => {
        stopReaper();
        const closed = server.close();
        await Promise.all([sessions.deleteAll(), pairs.stopAll()]);
        await closed;
        await registry.close();
      })();
      return shutdown;
    },
  };
}
