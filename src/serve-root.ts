import { createHash } from 'node:crypto';
import { createImagePulls } from './image-wiring.js';
import { mkdir, rm } from 'node:fs/promises';
import { homedir, totalmem } from 'node:os';
import { isAbsolute, join } from 'node:path';
import type { DockerContainerRuntime } from './adapters/docker/docker-container-runtime.js';
import { DockerSessionEngine } from './adapters/docker/docker-session-engine.js';
import { DockerImageBuilds } from './adapters/docker/docker-image-builds.js';
import { ImageBuilds } from './app/serve/image-build.js';
import { FileBuildRecords } from './adapters/fs/build-records.js';
import { EvidenceStore } from './app/evidence/evidence-store.js';
import { NodeFileSystem } from './adapters/fs/node-file-system.js';
import { engineMountStager } from './adapters/mount/engine-stager.js';
import { startApiServer } from './adapters/http/api-server.js';
import { watchSessionContainers } from './adapters/docker/docker-session-events.js';
import { isRegistryUnavailable } from './app/serve/api-error.js';
import { RoboguideError } from './core/errors.js';
import { ServeMetrics } from './adapters/http/serve-metrics.js';
import { instrumentRegistry } from './adapters/metrics/instrumented-registry.js';
import { claimDataDir, claimSocketFolder } from './adapters/http/socket-folder.js';
import { createRedactStream } from './adapters/redact-stream.js';
import { isPostgresLocation, registryFilePath, registryLocation } from './adapters/registry/default-path.js';
import { openRegistryAt } from './adapters/registry/open-registry.js';
import { registryWorkerFile, WorkerCapacityRegistry } from './adapters/registry/worker-registry.js';
import { engineSocketPaths } from './adapters/host-addresses.js';
import { systemClock } from './adapters/system-clock.js';
import type { CapacityRegistry } from './app/ports/capacity-registry.js';
import type { Executor } from './app/ports/executor-inventory.js';
import type { EgressGate } from './app/ports/egress.js';
import type { Logger } from './app/ports/logger.js';
import { PairService } from './app/serve/pair-service.js';
import { allowedEnvironment } from './app/serve/env-allow.js';
import { redactingLogger } from './app/serve/redacting-logger.js';
import { SessionManager } from './app/serve/session-manager.js';
import { DEFAULT_CONCURRENCY_LIMITS, type ConcurrencyLimits } from './app/serve/session-state.js';
import type { Adoption } from './app/serve/session-restart.js';
import { createDockerRuntime, createExecutePairDeps } from './composition-root.js';
import { hostMountRules } from './mount-wiring.js';

/** Default of `--stream-buffer-cap`: what one NDJSON exec stream may hold for a slow client (4 MiB). */
export const DEFAULT_STREAM_BUFFER_CAP = 4 * 1024 * 1024;
/** Defaults of `--max-builds` and `--max-build-context-mib` (POST /v1/images). */
export const DEFAULT_MAX_BUILDS = 2;
export const DEFAULT_MAX_BUILD_CONTEXT_BYTES = 1024 * 1024 * 1024;
/** Defaults of `--build-memory-mib` (each build step's memory) and `--build-timeout-sec` (a build's wall time). */
export const DEFAULT_BUILD_MEMORY_MIB = 2048;
export const DEFAULT_BUILD_TIMEOUT_SEC = 1800;
import { readLimitBasis } from './adapters/limit-basis.js';
import { limitDefaults } from './core/pair-limits.js';

/** Wiring of `roboguide-eval serve` (its own composition root, so the shared one stays small). */

export interface ServeOptions {
  readonly socketPath?: string;
  readonly listen?: { readonly host: string; readonly port: number; readonly token: string };
  /** `--metrics-listen`: loopback TCP serving only GET /metrics, with the bearer token (issue 45). */
  readonly metricsListen?: { readonly host: string; readonly port: number; readonly token: string };
  readonly dataDir?: string;
  /** `--mount-root` (real paths): when given, every session mount and pair cwd must lie under one of them. */
  readonly mountRoots?: readonly string[];
  /** Folders of ours no mount may reach besides the data directory (the token file's folder). */
  readonly ownedDirs?: readonly string[];
  readonly registryPath?: string;
  readonly bindAddress?: string;
  readonly reapIntervalMs?: number;
  readonly stopBudgetSec?: number;
  readonly maxOutputBytes?: number;
  /** Bytes an NDJSON exec stream may hold for a client that reads too slowly; past it the exec is killed. */
  readonly streamBufferCap?: number;
  /** The server's environment: its paths come from here; `${NAME}` references only reach `allowEnv` names. */
  readonly environment: Readonly<Record<string, string | undefined>>;
  /** `--allow-env`: the only variables sessions and pairs may reference (checked by the command). */
  readonly allowEnv?: readonly string[];
  readonly limits?: ConcurrencyLimits;
  /** Image builds at once (`--max-builds`; more: 429) and the largest build context (`--max-build-context-mib`; more: 413). */
  readonly maxBuilds?: number;
  readonly maxBuildContextBytes?: number;
  /** `--allow-builds`: POST /v1/images is refused (403 E_BUILDS_DISABLED) unless set (a build step runs as root). */
  readonly allowBuilds?: boolean;
  /** Each build step's memory and memory+swap (`--build-memory-mib`) and a build's wall time (`--build-timeout-sec`). */
  readonly buildMemoryMib?: number;
  readonly buildTimeoutSec?: number;
  readonly version: string;
  readonly logger: Logger;
  /** The engine to use (default: DOCKER_HOST or the local socket). */
  readonly runtime?: DockerContainerRuntime;
  /** Where `/v1/pairs` run (`--executor swarm`); default: `runtime`. Sessions always use `runtime`. */
  readonly pairExecutor?: Executor;
  /** Sessions' egress proxy (docs/spec.md §5.6); default: the local engine's, as pairs get it (absent there: none). */
  readonly egress?: EgressGate;
}

export interface RunningServe {
  readonly socketPath: string;
  readonly tcpPort: number | null;
  /** The `--metrics-listen` port, or null. */
  readonly metricsPort: number | null;
  readonly dataDir: string;
  readonly batchId: string;
  readonly adoption: Adoption;
  readonly sessions: SessionManager;
  /**
   * Stop accepting requests, delete every session (verified), stop running pairs, close the registry. Resolves
   * with the sessions whose slot could not be released (the registry was unreachable): their cleanup.json says so
   * and the next start releases them.
   */
  shutdown(): Promise<{
    readonly unreleased: readonly { readonly session_id: string; readonly error: string }[];
  }>;
}

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

/** Every `reapIntervalMs`, one pass over expired sessions (never two at once); returns how to stop it. */
function startReaper(sessions: SessionManager, logger: Logger, reapIntervalMs: number): () => void {
  let reaping = false;
  const reaper = setInterval(() => {
    if (reaping) return;
    reaping = true;
    sessions
      .reap()
      .catch((err: unknown) => logger.warn({ error: (err as Error).message }, 'reaper pass failed'))
      .finally(() => {
        reaping = false;
      });
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

/** Runs `undo` when `work` fails, and passes the failure on. */
async function whenFailing<T>(undo: () => void, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    undo();
    throw err;
  }
}

/**
 * A registry that cannot be reached at start: the error with serve's own next step (the registry layer's advice names
 * `e1-batch resume`, which is about batches).
 */
async function servesOwnAdvice<T>(work: () => Promise<T>): Promise<T> {
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

export async function startServe(options: ServeOptions): Promise<RunningServe> {
  // Before anything is made: a socket folder another user could use to take the socket over is refused (exit 2).
  const socketPath = await claimSocketFolder(options.socketPath ?? defaultSocketPath(options.environment));
  // First: an invalid ROBOGUIDE_PAIRS_NETWORK is refused before anything is written.
  const runtime = options.runtime ?? (await createDockerRuntime(options.environment));
  const { dataDir, tempRoot } = await prepareDataDir(options);
  const opened = await servesOwnAdvice(() => openServeRegistry(options));
  const { registryPath } = opened;
  // GET /metrics (issue 45): every registry call of this process timed, the live sessions and pairs counted.
  let pairsRef: PairService | null = null;
  let liveRef: SessionManager | null = null;
  const metrics = new ServeMetrics({
    sessions: () => liveRef?.list().length ?? 0,
    pairs: () => pairsRef?.runningCount() ?? 0,
  });
  const registry = instrumentRegistry(opened.registry, metrics.registryCalls);
  const engine = new DockerSessionEngine(runtime);
  const store = new EvidenceStore(new NodeFileSystem(), dataDir);
  const batchId = `serve-${createHash('sha256').update(dataDir).digest('hex').slice(0, 12)}`;
  const host = await hostMountRules(runtime, [dataDir, ...(options.ownedDirs ?? [])]);
  const protectedPaths = {
    ...host,
    outputDir: dataDir,
    ...(registryPath !== undefined ? { registryPath } : {}),
    homeDir: homedir(),
    engineSocketPaths: [...engineSocketPaths(options.environment), socketPath],
    ...(options.mountRoots !== undefined && options.mountRoots.length > 0
      ? { mountRoots: options.mountRoots }
      : {}),
  };
  const bindAddress = options.bindAddress ?? '127.0.0.1';
  const createRedactor = (secrets: readonly string[]) => createRedactStream(secrets);
  const allowedEnv = new Set(options.allowEnv ?? []);
  // Sessions and pairs resolve `${NAME}` from the allowed variables only (the routes refuse the others by name).
  const callerEnvironment = allowedEnvironment(options.environment, allowedEnv);
  // The callers' secrets (session environment, exec env) arrive with requests: the log masks those of every session,
  // and every allowed variable's value (an API pair's `${NAME}` resolves to one, and its errors are logged in detail).
  let sessionsRef: SessionManager | null = null;
  const allowedValues = Object.values(callerEnvironment).filter((v) => v !== '');
  const logger = redactingLogger(options.logger, () => [
    ...allowedValues,
    ...(sessionsRef?.allSecrets() ?? []),
  ]);
  const sessions = new SessionManager({
    engine,
    registry,
    clock: systemClock,
    logger,
    fs: new NodeFileSystem(),
    mountStager: engineMountStager(),
    store,
    batchId,
    environment: callerEnvironment,
    bindAddress,
    protectedPaths,
    createRedactor,
    stopBudgetSec: options.stopBudgetSec ?? 10,
    maxOutputBytes: options.maxOutputBytes ?? 16 * 1024 * 1024,
    allowedEnv,
    limits: options.limits ?? DEFAULT_CONCURRENCY_LIMITS,
    ...sessionEgressGate(options, runtime, logger),
    // A session that asks for no limits gets a pair's defaults for one at a time (issue 22).
    limitDefaults: limitDefaults({
      memoryTotalBytes: totalmem(),
      outputFreeBytes: null,
      maxConcurrentPairs: 1,
    }),
  });
  sessionsRef = sessions;
  liveRef = sessions;
  const watchFrom = Date.now();
  const adoption = await closingOnFailure(registry, () =>
    servesOwnAdvice(() => sessions.adopt((id) => runtime.environmentOf(id))),
  );
  // A session is as alive as its container: the engine's die/destroy ends it at once (replayed from before adoption).
  const events = watchSessionContainers(
    runtime.docker,
    batchId,
    (event) => sessions.containerEnded(event),
    logger,
    watchFrom,
  );
  // Staging points whose container is gone (a crashed server's, a pair's): adopted sessions' containers keep theirs.
  await engineMountStager()
    .sweep()
    .catch(() => undefined);
  const pairs = new PairService({
    pairDeps: {
      ...createExecutePairDeps(options.pairExecutor?.runtime ?? runtime, logger, options.pairExecutor),
      fs: new NodeFileSystem(),
      registry,
      limitBasis: readLimitBasis,
    },
    store,
    environment: callerEnvironment,
    allowedEnv,
    bindAddress,
    codeVersion: options.version,
    protectedPaths,
  });
  pairsRef = pairs;
  const server = await closingOnFailure(registry, () =>
    whenFailing(
      () => events.close(),
      () =>
        startApiServer({
          socketPath,
          ...(options.listen ? { listen: options.listen } : {}),
          ...(options.metricsListen ? { metricsListen: options.metricsListen } : {}),
          metrics,
          version: options.version,
          sessions,
          pairs,
          engine,
          tempRoot,
          createRedactor,
          streamBufferCap: options.streamBufferCap ?? DEFAULT_STREAM_BUFFER_CAP,
          logger,
          imagePulls: { pulls: createImagePulls(), environment: callerEnvironment, allowedEnv },
          images: {
            builds:
              options.allowBuilds === true
                ? new ImageBuilds(new DockerImageBuilds(runtime), new FileBuildRecords(dataDir), {
                    maxConcurrent: options.maxBuilds ?? DEFAULT_MAX_BUILDS,
                    memoryBytes: (options.buildMemoryMib ?? DEFAULT_BUILD_MEMORY_MIB) * 1024 * 1024,
                    timeoutMs: (options.buildTimeoutSec ?? DEFAULT_BUILD_TIMEOUT_SEC) * 1000,
                  })
                : null,
            maxContextBytes: options.maxBuildContextBytes ?? DEFAULT_MAX_BUILD_CONTEXT_BYTES,
          },
        }),
    ),
  );
  const stopReaper = startReaper(sessions, logger, options.reapIntervalMs ?? 5_000);
  let shutdown: ReturnType<RunningServe['shutdown']> | null = null;
  return {
    socketPath,
    tcpPort: server.tcpPort,
    metricsPort: server.metricsPort,
    dataDir,
    batchId,
    adoption,
    sessions,
    shutdown: () => {
      shutdown ??= (async () => {
        stopReaper();
        events.close();
        const closed = server.close();
        const [cleanup] = await Promise.all([sessions.deleteAll(), pairs.stopAll()]);
        for (const left of cleanup.unreleased)
          logger.error(
            { session: left.session_id, error: left.error },
            'shutdown: slot not released (recorded in cleanup.json); the next start releases it',
          );
        await closed;
        await registry
          .close()
          .catch((err: unknown) =>
            logger.warn({ error: (err as Error).message }, 'cannot close the registry'),
          );
        return { unreleased: cleanup.unreleased };
      })();
      return shutdown;
    },
  };
}

/** The sessions' egress proxy: the one given, else the local engine's (the pairs' own, when the pairs network is guarded). */
function sessionEgressGate(
  options: ServeOptions,
  runtime: DockerContainerRuntime,
  logger: Logger,
): { egress?: EgressGate } {
  const egress = options.egress ?? createExecutePairDeps(runtime, logger).egress;
  return egress !== undefined ? { egress } : {};
}
