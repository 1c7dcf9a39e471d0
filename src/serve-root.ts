import { totalmem } from 'node:os';
import { createImagePulls } from './image-wiring.js';
import type { DockerContainerRuntime } from './adapters/docker/docker-container-runtime.js';
import { DockerSessionEngine } from './adapters/docker/docker-session-engine.js';
import { DockerImageBuilds } from './adapters/docker/docker-image-builds.js';
import { ImageBuilds } from './app/serve/image-build.js';
import { FileBuildRecords } from './adapters/fs/build-records.js';
import { NodeFileSystem } from './adapters/fs/node-file-system.js';
import { engineMountStager } from './adapters/mount/engine-stager.js';
import { startApiServer, type RunningApiServer } from './adapters/http/api-server.js';
import { watchSessionContainers } from './adapters/docker/docker-session-events.js';
import { createRedactStream } from './adapters/redact-stream.js';
import { systemClock } from './adapters/system-clock.js';
import type { EgressGate } from './app/ports/egress.js';
import type { Logger } from './app/ports/logger.js';
import { PairService } from './app/serve/pair-service.js';
import { allowedEnvironment } from './app/serve/env-allow.js';
import { redactingLogger } from './app/serve/redacting-logger.js';
import { holdRedaction } from './core/redaction/compile.js';
import { SessionManager } from './app/serve/session-manager.js';
import type { SessionManagerDeps } from './app/serve/session-state.js';
import type { Adoption } from './app/serve/session-restart.js';
import {
  codeVersion,
  createExecutePairDeps,
  createExecutor,
  createStderrLogger,
} from './composition-root.js';
import type { ExecutorConfig } from './core/executor.js';
import { readLimitBasis } from './adapters/limit-basis.js';
import { limitDefaults } from './core/pair-limits.js';
import {
  type Base,
  closingOnFailure,
  type Live,
  openBase,
  protectedPathsOf,
  servesOwnAdvice,
} from './serve-base.js';
import { serveTuning, type ServeOptions, type ServeTuning } from './serve-options.js';

/**
 * The root of the API server, one process kind (`roboguide-eval serve`, the testing kit's server): its own wiring, so
 * the shared composition root stays small.
 */

/**
 * What the `serve` process adds to its compiled options: this tool's version, its stderr logger, and on a swarm the
 * executor its pairs run on (sessions and their execs stay on this host's engine: a swarm has no exec API).
 */
export async function serveProcessParts(
  executor: ExecutorConfig,
): Promise<Pick<ServeOptions, 'version' | 'logger' | 'pairExecutor'>> {
  const logger = createStderrLogger([], { longRunning: true });
  return {
    version: await codeVersion(),
    logger,
    ...(executor.kind === 'swarm' ? { pairExecutor: createExecutor(executor, [], logger) } : {}),
  };
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

/** Runs `undo` when `work` fails, and passes the failure on. */
async function whenFailing<T>(undo: () => void, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    undo();
    throw err;
  }
}

/** What sessions and pairs share: the allowed variables, the mount rules, the masking log, the tuning. */
interface Scope {
  readonly tuning: ServeTuning;
  readonly allowedEnv: ReadonlySet<string>;
  readonly callerEnvironment: Readonly<Record<string, string>>;
  readonly protectedPaths: SessionManagerDeps['protectedPaths'];
  readonly logger: Logger;
}

async function scopeOf(options: ServeOptions, base: Base, live: Live): Promise<Scope> {
  const tuning = serveTuning(options);
  const allowedEnv = new Set(tuning.allowEnv);
  // Sessions and pairs resolve `${NAME}` from the allowed variables only (the routes refuse the others by name).
  const callerEnvironment = allowedEnvironment(options.environment, allowedEnv);
  // The callers' secrets (session environment, exec env) arrive with requests: the log masks those of every session,
  // and every allowed variable's value (an API pair's `${NAME}` resolves to one, and its errors are logged in detail).
  const allowedValues = Object.values(callerEnvironment).filter((v) => v !== '');
  // Their masking compiled once (in steps) and held for the server's life: never compiled again on a log line.
  await holdRedaction(allowedValues, () => new Promise((resolve) => setImmediate(resolve)));
  const logger = redactingLogger(options.logger, () => [
    allowedValues,
    ...(live.sessions?.secretSets() ?? []),
  ]);
  return {
    tuning,
    allowedEnv,
    callerEnvironment,
    protectedPaths: await protectedPathsOf(options, base),
    logger,
  };
}

const createRedactor = (secrets: readonly string[]) => createRedactStream(secrets);

function createSessions(
  options: ServeOptions,
  base: Base,
  scope: Scope,
  engine: DockerSessionEngine,
): SessionManager {
  const { tuning, logger } = scope;
  return new SessionManager({
    engine,
    registry: base.registry,
    clock: systemClock,
    logger,
    fs: new NodeFileSystem(),
    mountStager: engineMountStager(),
    store: base.store,
    batchId: base.batchId,
    environment: scope.callerEnvironment,
    bindAddress: tuning.bindAddress,
    protectedPaths: scope.protectedPaths,
    createRedactor,
    stopBudgetSec: tuning.stopBudgetSec,
    maxOutputBytes: tuning.maxOutputBytes,
    allowedEnv: scope.allowedEnv,
    limits: tuning.limits,
    ...sessionEgressGate(options, base.runtime, logger),
    // A session that asks for no limits gets a pair's defaults for one at a time (issue 22).
    limitDefaults: limitDefaults({
      memoryTotalBytes: totalmem(),
      outputFreeBytes: null,
      maxConcurrentPairs: 1,
    }),
  });
}

/** Adopts the live sessions of a former run, then ends each session whose container dies (events from before). */
async function adoptAndWatch(
  base: Base,
  sessions: SessionManager,
  logger: Logger,
): Promise<{ adoption: Adoption; events: { close(): void } }> {
  const watchFrom = Date.now();
  const adoption = await closingOnFailure(base.registry, () =>
    servesOwnAdvice(() => sessions.adopt((id) => base.runtime.environmentOf(id))),
  );
  // A session is as alive as its container: the engine's die/destroy ends it at once (replayed from before adoption).
  const events = watchSessionContainers(
    base.runtime.docker,
    base.batchId,
    (event) => sessions.containerEnded(event),
    logger,
    watchFrom,
  );
  // Staging points whose container is gone (a crashed server's, a pair's): adopted sessions' containers keep theirs.
  await engineMountStager()
    .sweep()
    .catch(() => undefined);
  return { adoption, events };
}

function createPairs(options: ServeOptions, base: Base, scope: Scope): PairService {
  const runtime = options.pairExecutor?.runtime ?? base.runtime;
  return new PairService({
    pairDeps: {
      ...createExecutePairDeps(runtime, scope.logger, options.pairExecutor),
      fs: new NodeFileSystem(),
      registry: base.registry,
      limitBasis: readLimitBasis,
    },
    store: base.store,
    environment: scope.callerEnvironment,
    allowedEnv: scope.allowedEnv,
    bindAddress: scope.tuning.bindAddress,
    codeVersion: options.version,
    protectedPaths: scope.protectedPaths,
  });
}

/** POST /v1/images: off unless `allowBuilds`, then at most `maxBuilds` at once, each step bounded. */
function imageBuilds(base: Base, tuning: ServeTuning): ImageBuilds | null {
  if (!tuning.allowBuilds) return null;
  return new ImageBuilds(new DockerImageBuilds(base.runtime), new FileBuildRecords(base.dataDir), {
    maxConcurrent: tuning.maxBuilds,
    memoryBytes: tuning.buildMemoryMib * 1024 * 1024,
    timeoutMs: tuning.buildTimeoutSec * 1000,
  });
}

interface Services {
  readonly engine: DockerSessionEngine;
  readonly sessions: SessionManager;
  readonly pairs: PairService;
}

function startServer(
  options: ServeOptions,
  base: Base,
  scope: Scope,
  services: Services,
): Promise<RunningApiServer> {
  return startApiServer({
    socketPath: base.socketPath,
    ...(options.listen ? { listen: options.listen } : {}),
    ...(options.metricsListen ? { metricsListen: options.metricsListen } : {}),
    metrics: base.metrics,
    version: options.version,
    ...services,
    tempRoot: base.tempRoot,
    createRedactor,
    streamBufferCap: scope.tuning.streamBufferCap,
    logger: scope.logger,
    imagePulls: {
      pulls: createImagePulls(),
      environment: scope.callerEnvironment,
      allowedEnv: scope.allowedEnv,
    },
    images: {
      builds: imageBuilds(base, scope.tuning),
      maxContextBytes: scope.tuning.maxBuildContextBytes,
    },
  });
}

export async function startServe(options: ServeOptions): Promise<RunningServe> {
  const live: Live = { sessions: null, pairs: null };
  const base = await openBase(options, live);
  const scope = await scopeOf(options, base, live);
  const engine = new DockerSessionEngine(base.runtime);
  const sessions = createSessions(options, base, scope, engine);
  live.sessions = sessions;
  const { adoption, events } = await adoptAndWatch(base, sessions, scope.logger);
  const pairs = createPairs(options, base, scope);
  live.pairs = pairs;
  const server = await closingOnFailure(base.registry, () =>
    whenFailing(
      () => events.close(),
      () => startServer(options, base, scope, { engine, sessions, pairs }),
    ),
  );
  const stopReaper = startReaper(sessions, scope.logger, scope.tuning.reapIntervalMs);
  const stop = once(() =>
    shutDown({ base, logger: scope.logger, sessions, pairs, server, events, stopReaper }),
  );
  return {
    socketPath: base.socketPath,
    tcpPort: server.tcpPort,
    metricsPort: server.metricsPort,
    dataDir: base.dataDir,
    batchId: base.batchId,
    adoption,
    sessions,
    shutdown: stop,
  };
}

/** `work`'s promise, made on the first call and returned to every later one. */
function once<T>(work: () => Promise<T>): () => Promise<T> {
  let running: Promise<T> | null = null;
  return () => (running ??= work());
}

/** Stop accepting requests, delete every session (verified), stop running pairs, close the registry. */
async function shutDown(parts: {
  readonly base: Base;
  readonly logger: Logger;
  readonly sessions: SessionManager;
  readonly pairs: PairService;
  readonly server: RunningApiServer;
  readonly events: { close(): void };
  readonly stopReaper: () => void;
}): ReturnType<RunningServe['shutdown']> {
  const { logger } = parts;
  parts.stopReaper();
  parts.events.close();
  const closed = parts.server.close();
  const [cleanup] = await Promise.all([parts.sessions.deleteAll(), parts.pairs.stopAll()]);
  for (const left of cleanup.unreleased)
    logger.error(
      { session: left.session_id, error: left.error },
      'shutdown: slot not released (recorded in cleanup.json); the next start releases it',
    );
  await closed;
  await parts.base.registry
    .close()
    .catch((err: unknown) => logger.warn({ error: (err as Error).message }, 'cannot close the registry'));
  return { unreleased: cleanup.unreleased };
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
