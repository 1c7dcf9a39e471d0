import { join } from 'node:path';
import { createFileLogger } from './adapters/pino-logger.js';
import { isPostgresLocation, type RegistryLocation } from './adapters/registry/default-path.js';
import { launchSupervisor } from './adapters/supervisor-launcher.js';
import { supervise } from './app/batch/supervisor.js';
import { isBatchRecord } from './app/batch/layout.js';
import { nodesDown } from './app/batch/node-down.js';
import type { SupervisorDeps } from './app/batch/supervisor-deps.js';
import { EvidenceStore } from './app/evidence/evidence-store.js';
import type { Logger } from './app/ports/logger.js';
import { NodeFileSystem } from './adapters/fs/node-file-system.js';
import { openRecordedRegistry } from './adapters/registry/open-registry.js';
import { RoboguideError } from './core/errors.js';
import { BATCH_FILE, SUPERVISOR_LOG } from './core/evidence-names.js';
import { executorOfRecord } from './core/executor.js';
import { createImagePulls, createNodeImagePulls, readDockerConfig } from './image-wiring.js';
import * as root from './composition-root.js';
import * as pkg from './package-root.js';

/**
 * The root of the batch supervisor, one process kind: the detached process `start` and `resume` launch (the hidden
 * `e1-batch supervise`), or the same loop in the command's own process (`--foreground`). Commands that start one
 * reach it through their wiring in `src/command-root.ts`; only `e1-batch supervise` imports it directly.
 */

export type SupervisorMode = 'start' | 'resume';

/** How a command starts the supervisor of the batch in `output`: here, or as a detached process. */
export interface SupervisorStarter {
  /** In this process, logging on stderr; resolves with the state the batch ended in. */
  here(output: string): Promise<string>;
  /** As a detached process (its own process group); resolves once it runs. */
  launch(output: string): Promise<{ pid: number }>;
}

/**
 * `registry`: where the batch was admitted. batch.json records a PostgreSQL URL without its password, so the
 * password given to `start` is handed over (as PGPASSWORD to a detached supervisor); a resume takes it from
 * PGPASSWORD or ~/.pgpass.
 */
export function supervisorStarter(mode: SupervisorMode, registry?: RegistryLocation): SupervisorStarter {
  const password =
    registry !== undefined && isPostgresLocation(registry) ? registry.connection.password : undefined;
  return {
    here: (output) => superviseHere(output, mode, password),
    launch: (output) =>
      launchSupervisor(pkg.BIN_RUN_JS, output, mode, password !== undefined ? { PGPASSWORD: password } : {}),
  };
}

/** The batch's supervisor in this process (`--foreground`), logging on stderr with the batch's secrets masked. */
async function superviseHere(
  output: string,
  mode: SupervisorMode,
  password: string | undefined,
): Promise<string> {
  const logger = root.createStderrLogger(await root.batchLogSecrets(output), { longRunning: true });
  const deps = await createSupervisorDeps(output, logger, { registryPassword: password });
  try {
    return await supervise({ ...deps, handleSignals: true }, mode);
  } finally {
    await deps.dispose();
  }
}

/** `e1-batch supervise`: the detached supervisor, logging JSON lines in D/supervisor.log (the batch's secrets masked). */
export async function runDetachedSupervisor(output: string, mode: SupervisorMode): Promise<string> {
  const logger = await createSupervisorLogger(output);
  const deps = await createSupervisorDeps(output, logger);
  try {
    return await supervise(deps, mode);
  } finally {
    await deps.dispose();
    logger.flush();
  }
}

async function createSupervisorLogger(output: string): Promise<Logger & { flush(): void }> {
  return createFileLogger(join(output, SUPERVISOR_LOG), await root.batchLogSecrets(output), { output });
}

/** Everything a supervisor process needs, wired for the batch in `output`. */
async function createSupervisorDeps(
  output: string,
  logger: Logger,
  options: { readonly registryPassword?: string | undefined } = {},
): Promise<SupervisorDeps & { dispose(): Promise<void> }> {
  const fs = new NodeFileSystem();
  const store = new EvidenceStore(fs, output);
  const batch = await store.readJson(BATCH_FILE, isBatchRecord);
  if (batch === null)
    throw new RoboguideError('E_BATCH_STATE', `${output} is not a batch output directory`, { exitCode: 2 });
  const registry = await openRecordedRegistry(batch.registry_path, options.registryPassword);
  // The executor the batch was started with (batch.json): a resume runs where the start did.
  const where = root.createExecutor(executorOfRecord(batch.executor), await nodesDown(store), logger);
  return {
    store,
    registry,
    execute: root.createExecutePairDeps(where.runtime, logger, where),
    logger,
    environment: process.env,
    handleSignals: true,
    ...(batch.image_plan !== undefined ? { imagePulls: createImagePulls(), readDockerConfig } : {}),
    ...(batch.image_plan?.nodes !== undefined && batch.executor?.kind === 'swarm'
      ? { nodeImagePulls: createNodeImagePulls(batch.executor.node_engines) }
      : {}),
    dispose: () => registry.close(),
  };
}
