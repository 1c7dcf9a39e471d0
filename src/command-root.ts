import { BATCH_FILE, RECEIPT_FILE } from './core/evidence-names.js';
import { isBatchRecord } from './app/batch/layout.js';
import { stat } from 'node:fs/promises';
import { createDoctorDeps, freeDiskBytes } from './adapters/doctor-probes.js';
import { NodeFileSystem } from './adapters/fs/node-file-system.js';
import { hostAddresses } from './adapters/host-addresses.js';
import { procHostIdentity } from './adapters/host-identity.js';
import { observeGpus } from './adapters/nvidia-smi.js';
import { fileOutcomeReader } from './adapters/outcome-reader.js';
import {
  defaultRegistryPath,
  isPostgresLocation,
  registryFilePath,
  registryLocation,
} from './adapters/registry/default-path.js';
import {
  checkRegistryLocation,
  openRecordedRegistry,
  openRegistryAt,
} from './adapters/registry/open-registry.js';
import { DEFAULT_EXTRACT_LIMITS } from './adapters/safe-extract.js';
import { loadBatch } from './app/batch/batch-context.js';
import { movedImageLine, movedImages, type MovedImage } from './app/batch/image-pins.js';
import type { NodeDownDeps } from './app/batch/node-down.js';
import { batchSpaceWarning } from './app/batch/output-space.js';
import { readStatus } from './app/batch/read-status.js';
import type { ReportFileDeps } from './app/batch/report-file.js';
import { checkRegistryNeeds } from './app/batch/registry-needs.js';
import type { StartBatchDeps, StartBatchOptions } from './app/batch/start-batch-types.js';
import type { BatchStatus } from './app/batch/status-shapes.js';
import type { CapacityDeps } from './app/capacity-report.js';
import type { DoctorDeps } from './app/ports/doctor-probes.js';
import type { DoctorOptions } from './app/doctor/doctor-options.js';
import { EvidenceStore } from './app/evidence/evidence-store.js';
import type { ExistingRegistry } from './app/existing-evidence.js';
import { systemClock } from './adapters/system-clock.js';
import type { Clock } from './app/ports/clock.js';
import type { HostIdentity } from './app/ports/host-identity.js';
import type { PairNetworkGuard } from './app/ports/pair-network.js';
import type { OutputEvidenceDeps, ReconcileOutputDeps } from './app/pair/reconcile-output.js';
import type { RecoverOutputDeps } from './app/pair/recover-output.js';
import type { RunPairDeps, RunPairOptions } from './app/pair/run-pair-types.js';
import * as root from './composition-root.js';
import { supervisorStarter, type SupervisorStarter } from './supervisor-root.js';
import type { SessionTails } from './app/ports/session-tails.js';
import * as mount from './mount-wiring.js';
import { RoboguideError } from './core/errors.js';
import { createImagePulls, readDockerConfig, registryCompressedSize } from './image-wiring.js';
import { executorOfRecord, type ExecutorConfig } from './core/executor.js';

/**
 * The wiring of each command, on top of the shared composition root (`root.*`): a command parses its flags, asks here
 * for what its use-case needs, calls the use-case and renders. Everything is imported at the top (start-up:
 * docs/architecture.md, "start-up"; the engine client alone is loaded on first use, by the composition root).
 */

/** The local file system, behind the app's port. */
export const localFileSystem = new NodeFileSystem();

/** `e1-batch stop`: the batch's evidence, the clock its request is dated by, and who this process is. */
export function createStopWiring(output: string): { store: EvidenceStore; clock: Clock; host: HostIdentity } {
  return { store: evidenceStoreAt(output), clock: systemClock, host: procHostIdentity };
}

/** An evidence store on the local file system, rooted at `dir`. */
export function evidenceStoreAt(dir: string): EvidenceStore {
  return new EvidenceStore(new NodeFileSystem(), dir);
}

/** `e1-batch resume`: the batch's evidence, who this process is, its moved tags and how to start its supervisor. */
export function createResumeWiring(output: string): {
  readonly store: EvidenceStore;
  readonly host: HostIdentity;
  readonly movedImages: () => Promise<MovedImage[]>;
  readonly supervisor: SupervisorStarter;
} {
  return {
    store: evidenceStoreAt(output),
    host: procHostIdentity,
    movedImages: () => movedImagesOf(output),
    supervisor: supervisorStarter('resume'),
  };
}

/** `e1-batch continuation`: the original batch's evidence, the file system the manifest is written to, this tool. */
export async function createContinuationWiring(output: string): Promise<{
  readonly store: EvidenceStore;
  readonly options: {
    readonly codeVersion: string;
    readonly fs: NodeFileSystem;
    readonly host: HostIdentity;
  };
}> {
  return {
    store: evidenceStoreAt(output),
    options: { codeVersion: await root.codeVersion(), fs: localFileSystem, host: procHostIdentity },
  };
}

/** `diagnose sessions`: the session tails reader (node:zlib for `.jsonl.zst`). */
export function createDiagnoseSessionsWiring(): Promise<SessionTails> {
  return root.sessionTails();
}

/** `--registry` of reconcile and recover: a URL other than PostgreSQL's is refused, never taken for a path. */
function existingRegistry(flag: string | undefined): (recorded: string | null) => ExistingRegistry {
  return (recorded) => {
    if (flag === undefined && recorded !== null) {
      // The registry the evidence records (a PostgreSQL one's password from PGPASSWORD or ~/.pgpass, as for resume).
      return {
        path: recorded,
        file: !/^postgres(ql)?:\/\//i.test(recorded),
        explicit: false,
        open: async () => openRecordedRegistry(recorded),
      };
    }
    const location = registryLocation(flag);
    return {
      path: location.path,
      file: !isPostgresLocation(location),
      explicit: flag !== undefined,
      open: async () => {
        checkRegistryLocation(location); // an existing file that is no registry is refused, never migrated
        return openRegistryAt(location);
      },
    };
  };
}

/** The registry an output directory's evidence records: a batch's batch.json, or a pair run's receipt. */
async function recordedRegistry(output: string): Promise<string | null> {
  const store = evidenceStoreAt(output);
  const batch = await store.readJson(BATCH_FILE).catch(() => null);
  if (typeof batch?.registry_path === 'string') return batch.registry_path;
  const receipt = await store.readJson(RECEIPT_FILE).catch(() => null);
  return typeof receipt?.registry_path === 'string' ? receipt.registry_path : null;
}

/** The evidence of an existing output directory and the registry of `--registry` (reconcile, pair recover). */
function createOutputEvidenceDeps(registryFlag: string | undefined): OutputEvidenceDeps {
  return {
    isDirectory: async (path) => (await stat(path).catch(() => null))?.isDirectory() === true,
    exists: async (path) => (await stat(path).catch(() => null)) !== null,
    locateRegistry: existingRegistry(registryFlag),
    recordedRegistry,
    storeAt: evidenceStoreAt,
    runtimeFor: root.runtimeForOutput,
  };
}

export function createReconcileDeps(registryFlag: string | undefined): ReconcileOutputDeps {
  // The one outcome digest (OutcomeReader.sha256): null when there are no bytes to hash, as result.json records it.
  return {
    ...createOutputEvidenceDeps(registryFlag),
    readOutcomeSha256: (path) => fileOutcomeReader.sha256(path),
  };
}

export function createRecoverDeps(registryFlag: string | undefined): RecoverOutputDeps {
  return {
    ...createOutputEvidenceDeps(registryFlag),
    clock: systemClock,
    logger: root.createStderrLogger(),
    host: procHostIdentity,
    fs: new NodeFileSystem(),
    outcomes: fileOutcomeReader,
  };
}

export function createReportFileDeps(): ReportFileDeps {
  return {
    fs: new NodeFileSystem(),
    storeAt: evidenceStoreAt,
    host: procHostIdentity,
    imagesMoved: async (output) => (await movedImagesOf(output).catch(() => [])).map(movedImageLine),
  };
}

/**
 * Reads the status of the batch in `output` with the batch's own executor (a swarm batch's pairs are services on
 * the manager, not local containers); without an engine, from the evidence alone.
 */
export async function createStatusReader(output: string): Promise<(now: Date) => Promise<BatchStatus>> {
  const store = evidenceStoreAt(output);
  const runtime = await root.runtimeForOutput(store.root);
  const engine = await runtime.info().then(
    () => runtime,
    () => undefined,
  );
  return (now) => readStatus(store, engine, now, procHostIdentity);
}

/** The pinned images of the batch in `output` whose tag moved since start (none without an engine). */
async function movedImagesOf(output: string): Promise<MovedImage[]> {
  const store = evidenceStoreAt(output);
  const batch = await store.readJson(BATCH_FILE, isBatchRecord).catch(() => null);
  if (batch?.images === undefined) return [];
  // Advisory: an engine that cannot be reached says nothing here (the command's own engine calls report it).
  return root.runtimeForOutput(store.root).then(
    (runtime) => movedImages(batch, runtime),
    () => [],
  );
}

/** `e1-batch node-down`: the batch's recorded registry and executor (a runtime that counts the down nodes gone). */
export async function createNodeDownDeps(
  output: string,
): Promise<NodeDownDeps & { dispose(): Promise<void> }> {
  const store = evidenceStoreAt(output);
  const { batch } = await loadBatch(store);
  const registry = await openRecordedRegistry(batch.registry_path);
  return {
    store,
    registry,
    clock: systemClock,
    logger: root.createStderrLogger(),
    outcomes: fileOutcomeReader,
    runtimeFor: (downNodes) => root.createExecutor(executorOfRecord(batch.executor), downNodes).runtime,
    dispose: () => registry.close(),
  };
}

/** `capacity`: the registry of `--registry` (its location shown as given) and this host's GPUs. */
export async function openCapacity(
  registryFlag: string | undefined,
): Promise<CapacityDeps & { readonly registryPath: string; dispose(): Promise<void> }> {
  const location = registryLocation(registryFlag);
  const registry = await openRegistryAt(location);
  return {
    registryPath: location.path,
    registry,
    observeGpus: () => observeGpus(),
    dispose: () => registry.close(),
  };
}

/** `doctor`: the probes of this host, and where `--registry` points (a URL other than PostgreSQL's is refused). */
export async function createDoctorWiring(registryFlag: string | undefined): Promise<{
  readonly deps: DoctorDeps;
  readonly registry: Pick<DoctorOptions, 'registryPath' | 'registryPostgres' | 'defaultRegistryPath'>;
  readonly sessionsMaxBytes: number;
}> {
  const location = registryFlag !== undefined && registryFlag !== '' ? registryLocation(registryFlag) : null;
  return {
    deps: {
      ...createDoctorDeps(root.createContainerRuntime(), root.gatherBatchHostFacts),
      pairNetwork: (await root.createPairNetworkGuard()) ?? 'engine-bridge',
    },
    registry: {
      registryPath: location !== null && !isPostgresLocation(location) ? location.path : null,
      ...(location !== null && isPostgresLocation(location)
        ? { registryPostgres: { display: location.path, connection: location.connection } }
        : {}),
      defaultRegistryPath: defaultRegistryPath(),
    },
    sessionsMaxBytes: DEFAULT_EXTRACT_LIMITS.maxTotalBytes,
  };
}

/** `network setup` / `network remove`: the guard of the local engine; refused (exit 2) when ROBOGUIDE_PAIRS_NETWORK turns it off. */
export async function pairNetworkGuard(): Promise<PairNetworkGuard> {
  const guard = await root.createPairNetworkGuard();
  if (guard === null) {
    throw new RoboguideError(
      'E_USAGE',
      'ROBOGUIDE_PAIRS_NETWORK=engine-bridge turns the guarded pairs network off: nothing to set up or remove',
      { exitCode: 2, suggestions: ['unset ROBOGUIDE_PAIRS_NETWORK'] },
    );
  }
  return guard;
}

/** `e1-batch start`: what prepareBatch needs of this host, and the facts it checks the manifest against. */
export async function createBatchStartWiring(
  executor: ExecutorConfig,
  registryFlag: string | undefined,
): Promise<{
  readonly deps: StartBatchDeps;
  readonly supervisor: SupervisorStarter;
  readonly host: Pick<
    StartBatchOptions,
    'registryPath' | 'hostAddresses' | 'hostPaths' | 'environment' | 'codeVersion'
  >;
}> {
  const registry = registryLocation(registryFlag);
  // One executor: a swarm's runtime, inventories and node list come from the same opened executor.
  const swarm = executor.kind === 'swarm' ? root.createLazySwarmExecutor(executor) : null;
  const where = swarm ?? root.createExecutor(executor);
  const runtime = where.runtime;
  const deps: StartBatchDeps = {
    fs: new NodeFileSystem(),
    host: procHostIdentity,
    runtime,
    ...(where.nodes !== undefined ? { nodes: where.nodes } : {}),
    hostFacts: (request) => root.gatherBatchHostFacts(request),
    ...(swarm !== null ? { swarmNodes: () => swarm.swarmNodes() } : {}),
    clock: systemClock,
    ...(executor.kind === 'local'
      ? { imagePulls: createImagePulls(), compressedSize: registryCompressedSize, readDockerConfig }
      : // Swarm (issue 43): resolved by the manager's engine; no compressed size (the registry is the nodes' to reach).
        { imagePulls: createImagePulls(executor.manager), readDockerConfig }),
    observeGpus: () => observeGpus(),
    checkRegistry: async (needs) => {
      const opened = await openRegistryAt(registry);
      try {
        await checkRegistryNeeds(opened, needs);
      } finally {
        await opened.close();
      }
    },
  };
  const host = {
    registryPath: registry.path,
    hostAddresses: hostAddresses(),
    hostPaths: await mount.hostMountRules(runtime),
    environment: process.env,
    codeVersion: await root.codeVersion(),
  };
  return { deps, supervisor: supervisorStarter('start', registry), host };
}

/**
 * After `start` froze the manifest: a warning when the output file system has less free space than the batch's caps
 * could need, else null. Advisory: never stops a batch that was created (any failure here is null).
 */
export async function outputSpaceWarning(output: string): Promise<string | null> {
  try {
    return await batchSpaceWarning(evidenceStoreAt(output), {
      freeDiskBytes,
      sessionsMaxBytes: DEFAULT_EXTRACT_LIMITS.maxTotalBytes,
    });
  } catch {
    return null;
  }
}

/**
 * `pair run`: the adapters of the lifecycle (the registry opened only once the spec passed every check) and the host
 * facts the spec is checked against. A `--registry` URL other than PostgreSQL's is refused here, before anything else.
 */
export function createPairRunWiring(
  registryFlag: string | undefined,
  specText: string,
  executor: ExecutorConfig,
): {
  readonly deps: RunPairDeps & { dispose(): Promise<void> };
  readonly host: Pick<
    RunPairOptions,
    'environment' | 'codeVersion' | 'cwd' | 'hostAddresses' | 'hostPaths' | 'registryPath' | 'registryRecord'
  >;
} {
  const registry = registryLocation(registryFlag);
  const deps = root.createPairRunDeps(registry, root.specLogSecrets(specText), executor);
  const registryPath = registryFilePath(registry);
  return {
    deps,
    host: {
      environment: process.env,
      codeVersion: root.codeVersion,
      cwd: process.cwd(),
      hostAddresses: hostAddresses(),
      // The same answer the lifecycle asks for before its create: one engine `info` per process, not two.
      hostPaths: deps.hostMountRules ?? (() => mount.hostMountRules(deps.runtime)),
      ...(registryPath !== undefined ? { registryPath: registry.path } : {}),
      registryRecord: registry.path,
    },
  };
}
