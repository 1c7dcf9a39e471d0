import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type pinoModule from 'pino';
import type { DockerContainerRuntime } from './adapters/docker/docker-container-runtime.js';
import { LazyContainerRuntime } from './adapters/docker/lazy-container-runtime.js';
import { NodeFileSystem } from './adapters/fs/node-file-system.js';
import { lazyLogger } from './adapters/lazy-logger.js';
import { pinoRedactionOptions } from './adapters/log-redaction.js';
import { maskOutcomeCopy, publishOutcomeCopy } from './adapters/outcome-reader.js';
import { createRedactStream } from './adapters/redact-stream.js';
import type { ExecutePairDeps } from './app/execute-pair.js';
import { systemClock } from './app/ports/clock.js';
import type { ContainerRuntime } from './app/ports/container-runtime.js';
import type { Logger } from './app/ports/logger.js';
import type { RunPairDeps } from './app/run-pair.js';
import { EvidenceStore } from './adapters/fs/evidence-store.js';
import type { SqliteCapacityRegistry } from './adapters/registry/sqlite-capacity-registry.js';
import { registryLocation, type RegistryLocation } from './adapters/registry/default-path.js';
import { openRegistryAt } from './adapters/registry/open-registry.js';
import { engineSocketPaths } from './adapters/host-addresses.js';
import { BATCH_FILE, MANIFEST_FILE, type BatchRecord } from './app/batch/layout.js';
import type { SupervisorDeps } from './app/batch/supervisor.js';
import { RoboguideError } from './core/errors.js';
import { referencedValues } from './core/manifest/environment.js';

/**
 * The one place adapters are constructed. Commands ask for what they need here.
 *
 * Start-up time: this module and the commands import nothing heavy at their top. dockerode (with ssh2, gRPC and
 * protobufjs), pino, tar-stream and the zod schemas are loaded when first used: the container runtime on its first
 * engine call, the logger on its first line, session extraction and diagnosis when a pair ends
 * (docs/benchmarks.md, "start-up"; test/e2e/startup.e2e.test.ts checks what a command loads).
 */

/** Root of the installed package (the folder holding package.json, docker/, dist/). */
export const PACKAGE_ROOT = fileURLToPath(new URL('..', import.meta.url));
export const DOCKER_DIR = fileURLToPath(new URL('../docker', import.meta.url));

/**
 * The engine (dockerode over DOCKER_HOST / DOCKER_CERT_PATH, default the local socket), built on its first call; a
 * first `info()` on a unix socket is answered by a plain HTTP probe while dockerode loads.
 */
export function createContainerRuntime(): ContainerRuntime {
  return new LazyContainerRuntime(createDockerRuntime, async () => {
    const { engineUnixSocket, probeEngineInfo } = await import('./adapters/docker/engine-probe.js');
    const socket = await engineUnixSocket();
    return socket === null ? null : probeEngineInfo(socket);
  });
}

/** The dockerode runtime itself, for what needs dockerode's client (`images build`). */
export async function createDockerRuntime(): Promise<DockerContainerRuntime> {
  const { DockerContainerRuntime } = await import('./adapters/docker/docker-container-runtime.js');
  return new DockerContainerRuntime();
}

const PINO_LEVELS = new Set(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']);

/**
 * Our own diagnostics on stderr (JSON), warnings and up unless ROBOGUIDE_LOG_LEVEL says otherwise. pino is loaded on
 * the first line logged; a level pino does not know is refused at once, as before, not at the first line.
 */
export function createStderrLogger(secrets: readonly string[] = []): Logger {
  const level = process.env['ROBOGUIDE_LOG_LEVEL'] ?? 'warn';
  const create = (): Logger => {
    const pino = createRequire(import.meta.url)('pino') as typeof pinoModule;
    return pino({ level, ...pinoRedactionOptions(secrets) }, pino.destination(2));
  };
  return PINO_LEVELS.has(level) ? lazyLogger(create) : create();
}

/**
 * The values our own logs must mask for the batch in `output`: every `${NAME}` its frozen manifest
 * references, as this process's environment holds them. Empty when the manifest cannot be read (the
 * command then fails on its own, naming why).
 */
export async function batchLogSecrets(output: string): Promise<string[]> {
  try {
    const { parseManifest } = await import('./core/manifest/parse.js');
    const parsed = parseManifest(await readFile(join(output, MANIFEST_FILE), 'utf8'));
    return parsed.ok ? referencedValues(parsed.manifest.jobs.map((j) => j.environment), process.env) : [];
  } catch {
    return [];
  }
}

/** The same for a `pair run` spec text (before it is validated). */
export function specLogSecrets(specText: string): string[] {
  try {
    const spec = JSON.parse(specText) as { environment?: unknown };
    const env = spec.environment;
    if (typeof env !== 'object' || env === null) return [];
    const strings = Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => typeof e[1] === 'string'));
    return referencedValues([strings], process.env);
  } catch {
    return [];
  }
}

/** Adapters of the pair lifecycle, shared by `pair run` and the supervisor. */
export function createExecutePairDeps(runtime: ContainerRuntime, logger: Logger): ExecutePairDeps {
  return {
    runtime,
    clock: systemClock,
    logger,
    createRedactor: (secrets) => createRedactStream(secrets),
    extractSessions: async (archive, targetDir, transform, signal, redactName) => {
      const { extractArchiveSafely } = await import('./adapters/safe-extract.js');
      return extractArchiveSafely(archive, targetDir, { transform, signal, redactName });
    },
    diagnose: async (dir) => (await import('./app/diagnose-sessions.js')).diagnoseSessions(dir),
    publishOutcome: publishOutcomeCopy,
    maskOutcome: maskOutcomeCopy,
  };
}

/** `pair run`: the registry is opened (and a named one checked) only once the spec passed every check. */
export function createPairRunDeps(registry: RegistryLocation, logSecrets: readonly string[]): RunPairDeps & { dispose(): void } {
  const runtime = createContainerRuntime();
  let opened: SqliteCapacityRegistry | null = null;
  return {
    ...createExecutePairDeps(runtime, createStderrLogger(logSecrets)),
    fs: new NodeFileSystem(),
    registry: () => (opened ??= openRegistryAt(registry)),
    dispose: () => opened?.close(),
  };
}

/** What no pair may get mounted besides the output directory and the registry: $HOME and the engine's sockets. */
export function hostProtectedPaths(): { homeDir: string; engineSocketPaths: string[] } {
  return { homeDir: homedir(), engineSocketPaths: engineSocketPaths() };
}

export const BIN_RUN_JS = fileURLToPath(new URL('../bin/run.js', import.meta.url));

/** Everything a supervisor process needs, wired for the batch in `output`. */
export async function createSupervisorDeps(output: string, logger: Logger): Promise<SupervisorDeps & { dispose(): void }> {
  const fs = new NodeFileSystem();
  const store = new EvidenceStore(fs, output);
  const batch = await store.readJson<BatchRecord>(BATCH_FILE);
  if (batch === null) throw new RoboguideError('E_BATCH_STATE', `${output} is not a batch output directory`, { exitCode: 2 });
  const { SqliteCapacityRegistry } = await import('./adapters/registry/sqlite-capacity-registry.js');
  const registry = SqliteCapacityRegistry.open({ path: batch.registry_path });
  const runtime = createContainerRuntime();
  return {
    store,
    registry,
    execute: createExecutePairDeps(runtime, logger),
    logger,
    environment: process.env,
    handleSignals: true,
    dispose: () => registry.close(),
  };
}

/** The registry of `--registry` (a named one must exist or be new in an existing folder; a URL is refused). */
export function openRegistry(flag: string | undefined): SqliteCapacityRegistry {
  return openRegistryAt(registryLocation(flag));
}
