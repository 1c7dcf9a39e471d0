import type { EgressGate } from './app/ports/egress.js';
import { readDockerConfig } from './image-wiring.js';
import { NO_CREDENTIALS, registryCredentials } from './app/batch/registry-auth.js';
import { RECEIPT_FILE, BATCH_FILE, MANIFEST_FILE } from './core/evidence-names.js';
import { isBatchRecord } from './app/batch/layout.js';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { hostMountRules, mountOwners } from './mount-wiring.js';
import { readCodeVersion } from './adapters/code-version.js';
import * as pkg from './package-root.js';
import { createRequire } from 'node:module';
import type Pino from 'pino';
import { deferredLogger } from './adapters/deferred-logger.js';
import { humanLogDestination } from './adapters/stderr-log-format.js';
import type { DockerContainerRuntime } from './adapters/docker/docker-container-runtime.js';
import { askEngineFactsEarly } from './adapters/docker/engine-probe.js';
import { DockerPairNetwork } from './adapters/docker/docker-pair-network.js';
import { LazyContainerRuntime, LazyExecutorRuntime } from './adapters/docker/lazy-container-runtime.js';
import { defaultHostFactsSource } from './adapters/host-facts/systeminformation-host-facts.js';
import { extractArchiveSafely } from './adapters/safe-extract.js';
import { fileSessionTails } from './adapters/session-tails.js';
import type { SwarmExecutor } from './adapters/swarm/swarm-executor.js';
import { executorOfRecord, type ExecutorConfig } from './core/executor.js';
import { FileImageSessionsMemo, imageSessionsCacheFile } from './adapters/fs/image-sessions-file.js';
import { NodeFileSystem } from './adapters/fs/node-file-system.js';
import { pinoRedactionOptions } from './adapters/log-redaction.js';
import { fileOutcomeReader, maskOutcomeCopy, publishOutcomeCopy } from './adapters/outcome-reader.js';
import { engineMountStager } from './adapters/mount/engine-stager.js';
import { DiskUsageWalker } from './adapters/fs/disk-usage-walker.js';
import { ProcOpenFiles } from './adapters/fs/proc-open-files.js';
import { PrivilegeSweeper } from './adapters/fs/privilege-sweeper.js';
import { outcomeFolderOwner } from './adapters/fs/outcome-folder-owner.js';
import { readLimitBasis } from './adapters/limit-basis.js';
import { procHostIdentity } from './adapters/host-identity.js';
import { createRedactStream } from './adapters/redact-stream.js';
import type { ExecutePairDeps } from './app/pair/execute-pair-types.js';
import { systemClock } from './adapters/system-clock.js';
import type { ContainerRuntime } from './app/ports/container-runtime.js';
import type { Executor, ExecutorInventory } from './app/ports/executor-inventory.js';
import type { HostIdentity } from './app/ports/host-identity.js';
import type { Logger } from './app/ports/logger.js';
import type { OutcomeReader } from './app/ports/outcome-reader.js';
import type { SessionTails } from './app/ports/session-tails.js';
import { diagnoseSessions } from './app/diagnose-sessions.js';
import { gatherHostFacts } from './app/host-facts.js';
import { parseManifest } from './core/manifest/parse.js';
import type { RunPairDeps } from './app/pair/run-pair-types.js';
import { EvidenceStore } from './app/evidence/evidence-store.js';
import { registryLocation, type RegistryLocation } from './adapters/registry/default-path.js';
import { openRegistryAt } from './adapters/registry/open-registry.js';
import type { CapacityRegistry } from './app/ports/capacity-registry.js';
import { nodesDown } from './app/batch/node-down.js';
import { RoboguideError } from './core/errors.js';
import {
  PAIRS_NETWORK_VARIABLE,
  pairsNetworkSetting,
  type PairsNetworkSetting,
} from './core/pair-network.js';
import type { PairNetworkGuard } from './app/ports/pair-network.js';
import { referencedValues } from './core/manifest/environment.js';
import { failpointsFromEnvironment } from './adapters/env-failpoints.js';
import { installFailpoints } from './app/ports/failpoints.js';
import type { HostFactsRequest } from './app/ports/host-facts.js';
import type { HostFactsRecord } from './core/host-facts.js';
import type { SwarmNodeFacts } from './app/batch/swarm-node-names.js';

/**
 * The one place adapters are constructed. Commands ask for what they need here.
 *
 * Start-up time (docs/architecture.md, "start-up"): everything is imported at the top and `npm run build` bundles it
 * per command, except the engine client below, the one part loaded on first use.
 */

// Crash tests' failpoints (ROBOGUIDE_FAILPOINT…), read once from this process's environment: every CLI command
// loads this module. Unset, as in production, every point stays a no-op.
installFailpoints(failpointsFromEnvironment(process.env));

/**
 * The one part of the CLI loaded on first use, not at start: dockerode (with ssh2, gRPC and protobufjs: about
 * 130–170 ms, more than all the other modules of a command together) and the two runtimes built on it. `--help`, a
 * command refused on its input and the status fast path never load it.
 */
async function engineClient() {
  const [{ Dockerode: Docker, localEngineOptions }, { DockerContainerRuntime }, { openSwarmExecutor }] =
    await Promise.all([
      import('./adapters/docker/dockerode.js'),
      import('./adapters/docker/docker-container-runtime.js'),
      import('./adapters/swarm/swarm-executor.js'),
    ]);
  return { Docker, DockerContainerRuntime, openSwarmExecutor, localEngineOptions };
}

/** The engine (dockerode over DOCKER_HOST / DOCKER_CERT_PATH, default the local socket), built on its first call. */
export function createContainerRuntime(): LazyContainerRuntime {
  pairsNetworkSettingOf(process.env); // an invalid ROBOGUIDE_PAIRS_NETWORK: exit 2 now, before anything is written
  return new LazyContainerRuntime(createDockerRuntime);
}

/**
 * The dockerode runtime itself, for what needs dockerode's client (`images build`, `serve`). Network "bridge" is the
 * guarded pairs network (its rules set in this process's network namespace, the engine's when it is local) unless
 * ROBOGUIDE_PAIRS_NETWORK says `engine-bridge` (src/core/pair-network.ts).
 */
export async function createDockerRuntime(
  environment: Readonly<Record<string, string | undefined>> = process.env,
): Promise<DockerContainerRuntime> {
  const setting = pairsNetworkSettingOf(environment);
  // The engine's info asked before dockerode loads (issue 39): the engine answers while it loads (about 45 ms).
  const earlyFacts = askEngineFactsEarly();
  const { Docker, DockerContainerRuntime, localEngineOptions } = await engineClient();
  const docker = new Docker(localEngineOptions());
  return new DockerContainerRuntime(docker, {
    ...(setting === 'guarded' ? { pairNetwork: new DockerPairNetwork(docker) } : {}),
    earlyFacts: await earlyFacts,
  });
}

/** ROBOGUIDE_PAIRS_NETWORK, or E_USAGE (exit 2) naming the variable and the rule. */
function pairsNetworkSettingOf(
  environment: Readonly<Record<string, string | undefined>>,
): PairsNetworkSetting {
  const setting = pairsNetworkSetting(environment[PAIRS_NETWORK_VARIABLE]);
  if (!setting.ok)
    throw new RoboguideError('E_USAGE', `${PAIRS_NETWORK_VARIABLE} ${setting.rule}`, { exitCode: 2 });
  return setting.setting;
}

/** `network setup`, `network remove`, `doctor`: the guard of the local engine, null when ROBOGUIDE_PAIRS_NETWORK turns it off. */
export async function createPairNetworkGuard(
  environment: Readonly<Record<string, string | undefined>> = process.env,
): Promise<PairNetworkGuard | null> {
  if (pairsNetworkSettingOf(environment) !== 'guarded') return null;
  const { Docker } = await engineClient();
  return new DockerPairNetwork(new Docker());
}

/**
 * Where pairs run (issue 13): the local engine, or a swarm through its manager and the nodes' engines, built on its
 * first call. A swarm also has a node inventory (admission) and a placement inventory (status); the local engine neither.
 */
export function createExecutor(
  executor: ExecutorConfig,
  downNodes: readonly string[] = [],
  logger?: Logger,
): Executor {
  return executor.kind === 'local'
    ? { runtime: createContainerRuntime() }
    : createLazySwarmExecutor(executor, downNodes, logger);
}

/**
 * A swarm's executor, opened on its first call and once only: its runtime and inventories, and the swarm's nodes with
 * their GPUs (what `e1-batch start` checks a manifest against), all from the one executor.
 */
export function createLazySwarmExecutor(
  executor: ExecutorConfig & { kind: 'swarm' },
  downNodes: readonly string[] = [],
  logger?: Logger,
): Executor & { swarmNodes(): Promise<SwarmNodeFacts[]> } {
  let opened: Promise<SwarmExecutor> | null = null;
  const open = (): Promise<SwarmExecutor> =>
    (opened ??= createSwarmExecutor(executor, downNodes, logger ?? createStderrLogger()));
  return {
    runtime: new LazyExecutorRuntime(async () => (await open()).runtime),
    nodes: { readyNodes: async (constraints) => (await open()).nodes.readyNodes(constraints) },
    placements: { placementOf: async (id) => (await open()).placements.placementOf(id) },
    swarmNodes: async () =>
      (await (await open()).nodes.list()).map((n) => ({ node: n.hostname, id: n.id, gpus: n.gpus })),
  };
}

/** The swarm executor itself (dockerode loaded now). */
async function createSwarmExecutor(
  executor: ExecutorConfig & { kind: 'swarm' },
  downNodes: readonly string[] = [],
  logger: Logger = createStderrLogger(),
): Promise<SwarmExecutor> {
  const { openSwarmExecutor } = await engineClient();
  return openSwarmExecutor({
    manager: executor.manager,
    nodeEngines: executor.node_engines,
    downNodes,
    logger,
  });
}

/**
 * The runtime that owns the pairs of the evidence in `output`: a batch's recorded executor (with the nodes declared
 * down), else the local engine. Commands that verify removals of an existing batch (reconcile, status) use it: a
 * swarm batch's ids are services, which the local engine would wrongly call absent.
 */
export async function runtimeForOutput(output: string): Promise<ContainerRuntime> {
  const store = new EvidenceStore(new NodeFileSystem(), output);
  const batch = await store.readJson(BATCH_FILE, isBatchRecord).catch(() => null);
  if (batch === null) {
    // A `pair run` output: its executor is not recorded. A swarm pair's id is a service id (25 characters, not the
    // engine's 64 hex), which the local engine would call absent: refuse rather than release a slot on a guess.
    const receipt = await store.readJson(RECEIPT_FILE).catch(() => null);
    const id = receipt?.container_id;
    if (typeof id === 'string' && !/^[0-9a-f]{64}$/.test(id)) {
      throw new RoboguideError(
        'E_USAGE',
        `${output} holds a pair that ran on a swarm (service ${id}): recover or reconcile it on the swarm's manager is not supported yet`,
        {
          exitCode: 2,
          suggestions: [
            'remove the service on the manager (`docker service rm`), confirm its container is gone on its node, then reconcile',
          ],
        },
      );
    }
  }
  if (batch?.executor === undefined) return createContainerRuntime();
  return createExecutor(executorOfRecord(batch.executor), await nodesDown(store)).runtime;
}

/**
 * Our own diagnostics on stderr (JSON; a human line each on a terminal, or as ROBOGUIDE_LOG_FORMAT says), warnings and
 * up unless ROBOGUIDE_LOG_LEVEL says otherwise; a level pino does not know is refused at once.
 */
export function createStderrLogger(
  secrets: readonly string[] = [],
  options: { readonly longRunning?: boolean } = {},
): Logger {
  const level = process.env['ROBOGUIDE_LOG_LEVEL'] ?? 'warn';
  // ROBOGUIDE_LOG_FORMAT is checked now; pino is loaded on the first line the level lets through (deferred-logger.ts),
  // or now for a long-running process (serve, a supervisor), which should not first need a package hours later.
  const human = humanLogDestination();
  const make = (): Logger => {
    const pino = createRequire(import.meta.url)('pino') as typeof Pino;
    return pino({ level, ...pinoRedactionOptions(secrets) }, human ?? pino.destination(2));
  };
  return deferredLogger(level, make, options.longRunning === true);
}

/**
 * The values our own logs must mask for the batch in `output`: every `${NAME}` its frozen manifest
 * references, as this process's environment holds them. Empty when the manifest cannot be read (the
 * command then fails on its own, naming why).
 */
export async function batchLogSecrets(output: string): Promise<string[]> {
  try {
    const parsed = parseManifest(await readFile(join(output, MANIFEST_FILE), 'utf8'));
    if (!parsed.ok) return [];
    const registries = await registryCredentials(parsed.manifest, process.env, readDockerConfig).catch(
      () => NO_CREDENTIALS,
    );
    return [
      ...referencedValues(
        parsed.manifest.jobs.map((j) => j.environment),
        process.env,
      ),
      ...registries.secrets,
    ];
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
    const strings = Object.fromEntries(
      Object.entries(env).filter((e): e is [string, string] => typeof e[1] === 'string'),
    );
    return referencedValues([strings], process.env);
  } catch {
    return [];
  }
}

/** The host's ports for the use-cases that take them directly (status, reconcile, `pair recover`, node-down). */
export const hostIdentity: HostIdentity = procHostIdentity;
export const outcomeReader: OutcomeReader = fileOutcomeReader;

/** Session tails (node:zlib for `.jsonl.zst`). */
export function sessionTails(): Promise<SessionTails> {
  return Promise.resolve(fileSessionTails);
}

/** Adapters of the pair lifecycle, shared by `pair run` and the supervisor; `inventory`: a swarm executor's. */
export function createExecutePairDeps(
  runtime: ContainerRuntime,
  logger: Logger,
  inventory: ExecutorInventory = {},
): ExecutePairDeps {
  // Asked once per process (the engine's data root and the password database do not change under a batch).
  let hostRules: ReturnType<typeof hostMountRules> | null = null;
  return {
    runtime,
    ...(inventory.nodes !== undefined ? { nodes: inventory.nodes } : {}),
    ...(inventory.placements !== undefined ? { placements: inventory.placements } : {}),
    clock: systemClock,
    logger,
    fs: new NodeFileSystem(),
    host: hostIdentity,
    outcomes: outcomeReader,
    createRedactor: (secrets) => createRedactStream(secrets),
    extractSessions: (archive, targetDir, transform, signal, redactName) =>
      extractArchiveSafely(archive, targetDir, { transform, signal, redactName }),
    diagnose: (dir) => diagnoseSessions(fileSessionTails, dir),
    imageSessions: new FileImageSessionsMemo(imageSessionsCacheFile(process.env)),
    publishOutcome: publishOutcomeCopy,
    maskOutcome: maskOutcomeCopy,
    hostMountRules: () => (hostRules ??= hostMountRules(runtime)),
    mountOwners: mountOwners(),
    // Staged mounts on the local engine only: a swarm node binds its own host's paths.
    ...(inventory.nodes === undefined ? { mountStager: engineMountStager() } : {}),
    // The egress proxy on the local engine's guarded network only: elsewhere an allowlisted pair fails closed.
    ...(inventory.nodes === undefined && pairsNetworkSettingOf(process.env) === 'guarded'
      ? { egress: localEgressGate() }
      : {}),
    disk: new DiskUsageWalker(),
    openFiles: new ProcOpenFiles(),
    privilegeSweep: new PrivilegeSweeper(),
    handOverOutcomeFolder: outcomeFolderOwner(runtime),
  };
}

/** The host's egress proxy (docs/spec.md §5.6), its client made on the first allowlisted pair. */
function localEgressGate(): EgressGate {
  let gate: Promise<EgressGate> | null = null;
  const made = async (): Promise<EgressGate> => {
    const [{ Docker }, { createEgressGate }] = await Promise.all([
      engineClient(),
      import('./adapters/egress/egress-gate.js'),
    ]);
    return createEgressGate(new Docker());
  };
  return { open: async (policy, token) => (await (gate ??= made())).open(policy, token) };
}

/** `pair run`: the registry is opened (and a named one checked) only once the spec passed every check. */
export function createPairRunDeps(
  registry: RegistryLocation,
  logSecrets: readonly string[],
  executor: ExecutorConfig = { kind: 'local' },
): RunPairDeps & { dispose(): Promise<void> } {
  const logger = createStderrLogger(logSecrets);
  const where = createExecutor(executor, [], logger);
  let opened: Promise<CapacityRegistry> | null = null;
  return {
    ...createExecutePairDeps(where.runtime, logger, where),
    registry: () => (opened ??= openRegistryAt(registry)),
    limitBasis: readLimitBasis,
    dispose: async () => {
      if (opened !== null) await (await opened.catch(() => null))?.close();
    },
  };
}

/** Host facts for `e1-batch start`'s batch.json (systeminformation in child processes, static facts cached per boot). */
export async function gatherBatchHostFacts(request: HostFactsRequest): Promise<HostFactsRecord> {
  return gatherHostFacts({ source: defaultHostFactsSource(), clock: systemClock }, request);
}

/** This tool's exact code version (package version and git commit), as receipts and batch.json record it. */
export async function codeVersion(): Promise<string> {
  return readCodeVersion(pkg.PACKAGE_ROOT, { fromBuild: pkg.RUNS_FROM_BUILD });
}

/**
 * The registry of `--registry`: a PostgreSQL URL, or a SQLite file (a named one must exist or be new in an
 * existing folder); any other URL is refused.
 */
export function openRegistry(flag: string | undefined): Promise<CapacityRegistry> {
  return openRegistryAt(registryLocation(flag));
}
