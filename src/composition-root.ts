import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { DockerContainerRuntime } from './adapters/docker/docker-container-runtime.js';
import { NodeFileSystem } from './adapters/fs/node-file-system.js';
import { pinoRedactionOptions } from './adapters/log-redaction.js';
import { maskOutcomeCopy, publishOutcomeCopy } from './adapters/outcome-reader.js';
import { createRedactStream } from './adapters/redact-stream.js';
import { extractArchiveSafely } from './adapters/safe-extract.js';
import { diagnoseSessions } from './app/diagnose-sessions.js';
import type { ExecutePairDeps } from './app/execute-pair.js';
import { systemClock } from './app/ports/clock.js';
import type { ContainerRuntime } from './app/ports/container-runtime.js';
import type { Logger } from './app/ports/logger.js';
import type { RunPairDeps } from './app/run-pair.js';
import { EvidenceStore } from './adapters/fs/evidence-store.js';
import { SqliteCapacityRegistry } from './adapters/registry/sqlite-capacity-registry.js';
import { registryLocation, type RegistryLocation } from './adapters/registry/default-path.js';
import { openRegistryAt } from './adapters/registry/open-registry.js';
import { engineSocketPaths } from './adapters/host-addresses.js';
import { BATCH_FILE, MANIFEST_FILE, type BatchRecord } from './app/batch/layout.js';
import type { SupervisorDeps } from './app/batch/supervisor.js';
import { RoboguideError } from './core/errors.js';
import { parseManifest, referencedValues } from './core/manifest/index.js';
import { ImageSessionsMemo } from './core/sessions-skip.js';

/** The one place adapters are constructed. Commands ask for what they need here. */

/** Root of the installed package (the folder holding package.json, docker/, dist/). */
export const PACKAGE_ROOT = fileURLToPath(new URL('..', import.meta.url));
export const DOCKER_DIR = fileURLToPath(new URL('../docker', import.meta.url));

export function createContainerRuntime(): DockerContainerRuntime {
  // DOCKER_HOST / DOCKER_CERT_PATH are honoured by dockerode; default is the local socket.
  return new DockerContainerRuntime();
}

/** Our own diagnostics on stderr (JSON), warnings and up unless ROBOGUIDE_LOG_LEVEL says otherwise. */
export function createStderrLogger(secrets: readonly string[] = []): Logger {
  return pino({ level: process.env['ROBOGUIDE_LOG_LEVEL'] ?? 'warn', ...pinoRedactionOptions(secrets) }, pino.destination(2));
}

/**
 * The values our own logs must mask for the batch in `output`: every `${NAME}` its frozen manifest
 * references, as this process's environment holds them. Empty when the manifest cannot be read (the
 * command then fails on its own, naming why).
 */
export async function batchLogSecrets(output: string): Promise<string[]> {
  try {
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
    extractSessions: (archive, targetDir, transform, signal, redactName) => extractArchiveSafely(archive, targetDir, { transform, signal, redactName }),
    diagnose: (dir) => diagnoseSessions(dir),
    imageSessions: new ImageSessionsMemo(),
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
