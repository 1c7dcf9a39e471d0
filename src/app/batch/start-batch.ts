import { isReceipt } from '../../core/receipt.js';
import { randomUUID } from 'node:crypto';
import { EvidenceStore } from '../evidence/evidence-store.js';
import { InvalidInputError, RoboguideError, type Issue } from '../../core/errors.js';
import type { Manifest } from '../../core/manifest/schema.js';
import { bindAddressProblem } from '../../core/bind-address.js';
import { jobPathIssues, resolveReal, staleOutcomeIssues } from '../job-paths.js';
import { loadManifest } from '../load-manifest.js';
import { admissionNodesFor } from '../admission.js';
import type { ContainerRuntime } from '../ports/container-runtime.js';
import type { FileSystem } from '../ports/file-system.js';
import { sha256Hex } from '../digest.js';
import { compareDeclaredTotal } from '../../core/gpu/nvidia-smi-parse.js';
import { environmentMissing } from './batch-context.js';
import { environmentIssues, groupedByJob } from '../../core/manifest/environment.js';
import { batchHostRequest } from '../host-facts.js';
import type { HostFactsRecord } from '../../core/host-facts.js';
import { limitDefaults, LOW_DISK_LIMIT_BYTES, type LimitDefaults } from '../../core/pair-limits.js';
import {
  BATCH_SCHEMA,
  isBatchRecord,
  receiptRel,
  type BatchGpuObservation,
  type BatchRecord,
} from './layout.js';
import { BATCH_FILE, MANIFEST_FILE } from '../../core/evidence-names.js';
import { refuseUsedOutput } from './output-precheck.js';
import { registryNeeds } from './registry-needs.js';
import { runtimeIssues } from './runtime-issues.js';
import { gpuCount, swarmJobIssues, swarmSlots } from './swarm-checks.js';
import { dataRootFree, imagePlanRecord, planOf } from './image-plan-start.js';
import type { StartBatchDeps, StartBatchOptions } from './start-batch-types.js';
import { checkImages, type EngineImages, type ImagePlanner } from './image-check.js';
import { withNodeHostnames, type SwarmNodeFacts } from './swarm-node-names.js';

/** Job ids already claimed by the batch a continuation continues: they must never run again. */
async function claimedInOriginal(manifest: Manifest, fs: FileSystem): Promise<Issue[]> {
  const origin = manifest.continuation_of;
  if (!origin) return [];
  const original = new EvidenceStore(fs, origin.output);
  // The original must be readable and be that batch, or the claims cannot be checked: refuse rather than guess.
  const batch = await original.readJson(BATCH_FILE, isBatchRecord).catch(() => null);
  if (batch === null || batch.batch_id !== origin.batch_id) {
    return [
      {
        path: 'continuation_of.output',
        rule: `must be the readable output directory of batch ${origin.batch_id}`,
      },
    ];
  }
  const issues: Issue[] = [];
  for (const [i, job] of manifest.jobs.entries()) {
    const receipt = await original.readJson(receiptRel(job.job_id), isReceipt);
    if (receipt !== null && receipt.batch_id === origin.batch_id) {
      issues.push({
        path: `jobs[${i}].job_id`,
        rule: `"${job.job_id}" was claimed in batch ${origin.batch_id}; a continuation never runs a claimed pair again`,
      });
    }
  }
  return issues;
}

/**
 * When the manifest asks for GPUs: what nvidia-smi sees, compared with the declared `capacity.gpu_total_mib`.
 * A mismatch is a warning (recorded and printed), not an error; an unobservable host keeps the batch serial.
 */
async function observeForManifest(
  deps: StartBatchDeps,
  manifest: Manifest,
): Promise<BatchGpuObservation | null> {
  if (!manifest.jobs.some((j) => j.gpus !== undefined) || !deps.observeGpus) return null;
  const observation = await deps.observeGpus();
  const declared = manifest.capacity.gpu_total_mib;
  const comparison = declared === undefined ? null : compareDeclaredTotal(declared, observation);
  const warnings: string[] = [];
  if (observation.kind === 'unobservable')
    warnings.push(`GPUs not observable (${observation.reason}): the batch stays serial`);
  if (comparison?.kind === 'mismatch') warnings.push(`capacity.gpu_total_mib: ${comparison.message}`);
  return { observation, comparison, warnings };
}

function bindAddressIssues(options: StartBatchOptions): Issue[] {
  if (options.hostAddresses === undefined) return [];
  const problem = bindAddressProblem(options.bindAddress, options.hostAddresses);
  return problem === null ? [] : [{ path: '--bind-address', rule: problem }];
}

const POSTGRES_URL = /^postgres(ql)?:\/\//i;
function isPostgresUrl(registry: string): boolean {
  return POSTGRES_URL.test(registry);
}

/** The manifest as read and every check that needs no engine; warnings printed once it passed. */
async function checkManifest(
  deps: StartBatchDeps,
  options: StartBatchOptions,
): Promise<{ readonly bytes: Uint8Array; readonly manifest: Manifest }> {
  const resolveOptions = { allowShortSecrets: options.allowShortSecrets === true };
  const { bytes, manifest } = await loadManifest(deps.fs, options.manifestPath, {
    source: options.environment,
    options: resolveOptions,
  });
  const { resolved: envs, issues: envIssues } = environmentIssues(
    manifest.jobs,
    options.environment,
    undefined,
    resolveOptions,
  );
  const issues = [
    ...bindAddressIssues(options),
    ...swarmJobIssues(manifest, options.executor),
    ...(await claimedInOriginal(manifest, deps.fs)),
    ...(await staleOutcomeIssues(
      deps.fs,
      manifest.jobs.map((job, i) => ({ prefix: `jobs[${i}]`, outcome_path: job.outcome_path })),
    )),
    ...(await jobPathIssues(
      deps.fs,
      manifest.jobs.map((job, i) => ({ prefix: `jobs[${i}]`, cwd: job.cwd, outcome_path: job.outcome_path })),
      {
        ...options.hostPaths,
        ...(await engineDataRoot(deps.runtime, options.hostPaths?.ownedDirs)),
        outputDir: options.output,
        ...(isPostgresUrl(options.registryPath) ? {} : { registryPath: options.registryPath }),
        ...(options.mountRoots !== undefined && options.mountRoots.length > 0
          ? { mountRoots: options.mountRoots }
          : {}),
      },
    )),
  ];
  // Every problem in one run (issue 40); unset variables alone keep their own code.
  if (issues.length === 0 && envIssues.length > 0) throw environmentMissing(envIssues, manifest.jobs);
  if (issues.length > 0) {
    const all = [...issues, ...envIssues];
    const ids = manifest.jobs.map((job) => job.job_id);
    throw new InvalidInputError('E_MANIFEST_INVALID', `manifest ${options.manifestPath} cannot start`, all, {
      shown: groupedByJob(all, ids),
    });
  }
  for (const warning of new Set([...envs.values()].flatMap((e) => e.warnings))) options.onWarning?.(warning);
  return { bytes, manifest };
}

/** The engine's real data root, protected from mounts, with `owned` (the engine's answer is asked here: a refused manifest needs it). */
async function engineDataRoot(
  runtime: ContainerRuntime,
  owned: readonly string[] = [],
): Promise<{ ownedDirs?: readonly string[] }> {
  const root = await runtime.info().then(
    (i) => i.dataRoot,
    () => undefined,
  );
  const dirs = [...owned, ...(root !== undefined && root.startsWith('/') ? [root] : [])];
  return dirs.length > 0 ? { ownedDirs: dirs } : {};
}

/**
 * The engine answers, and has every image of the manifest: each resolved to its id (the batch's pins, SPEC §3).
 * Missing images are refused together (exit 2), each with the jobs that use it and how to get it there.
 */
async function checkEngine(
  runtime: ContainerRuntime,
  manifest: Manifest,
  bin: string,
  plan?: ImagePlanner,
): Promise<EngineImages & { readonly engine: Awaited<ReturnType<ContainerRuntime['info']>> }> {
  const engine = await runtime.info();
  const runtimes = runtimeIssues(manifest, engine);
  if (runtimes.length > 0)
    throw new InvalidInputError(
      'E_MANIFEST_INVALID',
      'the batch asks for a runtime this engine cannot give',
      runtimes,
    );
  return { engine, ...(await checkImages(runtime, manifest, bin, plan)) };
}

/**
 * A swarm's nodes as the manager lists them (asked once, before the engine checks), and the executor with each
 * `--node-engine` NODE as its node's hostname (src/app/batch/swarm-node-names.ts): an unknown or doubled NODE is
 * refused before the nodes' engines are asked anything. Undefined: the local executor (or no node list).
 */
async function swarmNaming(
  deps: StartBatchDeps,
  options: StartBatchOptions,
): Promise<
  (ReturnType<typeof withNodeHostnames> & { readonly nodes: readonly SwarmNodeFacts[] }) | undefined
> {
  const executor = options.executor;
  if (executor?.kind !== 'swarm' || deps.swarmNodes === undefined) return undefined;
  const nodes = await deps.swarmNodes();
  return { ...withNodeHostnames(executor, nodes), nodes };
}

/** Where the batch's pairs run: this host's GPUs as observed, or a swarm's nodes and how many pairs fit at once. */
async function executorFacts(
  deps: StartBatchDeps,
  options: StartBatchOptions,
  manifest: Manifest,
  swarmNodes: readonly SwarmNodeFacts[] | undefined,
): Promise<Partial<BatchRecord> & Pick<BatchRecord, 'gpu_observation'>> {
  const swarm = options.executor?.kind === 'swarm';
  const gpuObservation = swarm ? null : await observeForManifest(deps, manifest);
  const executorSlots =
    swarmNodes !== undefined
      ? swarmSlots(swarmNodes, Math.max(0, ...manifest.jobs.map((j) => gpuCount(j.gpus))))
      : undefined;
  return {
    gpu_observation: gpuObservation,
    ...(options.executor !== undefined && options.executor.kind !== 'local'
      ? { executor: options.executor }
      : {}),
    ...(executorSlots !== undefined ? { executor_slots: executorSlots } : {}),
    ...(swarmNodes !== undefined
      ? { executor_nodes: swarmNodes.map((n) => ({ node: n.node, id: n.id, gpus: n.gpus })) }
      : {}),
  };
}

/**
 * Validate everything, then freeze the manifest into a new output directory with the batch identity. Nothing
 * is written unless every check passed. The caller launches the supervisor.
 */
export async function prepareBatch(deps: StartBatchDeps, options: StartBatchOptions): Promise<BatchRecord> {
  const checked = await checkBatch(deps, options);
  // After every refusal (a refused start never waits for them), side by side with creating the output directory.
  const host = deps.hostFacts?.(batchHostRequest(options.output, checked.engine, options.executor));

  await EvidenceStore.createOutputDir(deps.fs, options.output);
  const store = new EvidenceStore(deps.fs, options.output);
  const now = deps.clock.now();
  const record = await batchRecordOf(deps, options, checked, { host, now });
  const { manifest } = checked;
  const limits = batchLimitDefaults(manifest, record.host, options.executor?.kind === 'swarm');
  warnDefaultDiskLimit(manifest, limits, options.onWarning);
  const withLimits: BatchRecord = { ...record, pair_limit_defaults: limits };
  // batch.json is published exclusively, first: of two starts racing on one empty directory only one goes on
  // to freeze its manifest.
  if ((await store.publishExclusive(BATCH_FILE, withLimits)) === 'exists') {
    throw new RoboguideError('E_OUTPUT_NOT_EMPTY', `${options.output} already holds a batch`, {
      exitCode: 2,
    });
  }
  await store.writeBytesAtomic(MANIFEST_FILE, checked.bytes);
  await store.appendJournal({
    type: 'batch_created',
    at: now.toISOString(),
    batch_id: record.batch_id,
    jobs: manifest.jobs.length,
  });
  return withLimits;
}

/** Every refusal of a start, in order: the output folder, the manifest, the swarm's node names, the engine and images, the registry. */
async function checkBatch(deps: StartBatchDeps, options: StartBatchOptions) {
  // The folder first: a reused one is one line, not every job's outcome_path that its finished batch left (issue 40).
  await refuseUsedOutput(deps.fs, options.output, {
    bin: options.bin ?? 'roboguide-eval',
    typed: options.outputAsTyped ?? options.output,
  });
  const { bytes, manifest } = await checkManifest(deps, options);
  const bin = options.bin ?? 'roboguide-eval';
  const named = await swarmNaming(deps, options);
  const images = await checkEngine(deps.runtime, manifest, bin, planOf(deps, options, manifest));
  const { gpu_observation: gpuObservation, ...placement } = await executorFacts(
    deps,
    named !== undefined ? { ...options, executor: named.executor } : options,
    manifest,
    named?.nodes,
  );
  const hostnameOf = named?.hostnameOf ?? ((name: string) => name);
  const nodes = options.executor?.kind === 'swarm' ? admissionNodesFor(deps.nodes) : undefined;
  await deps.checkRegistry?.(
    registryNeeds(manifest, {
      ...(nodes ? { nodes } : {}),
      ...(options.onWarning ? { warn: options.onWarning } : {}),
      isAlive: (lease) => deps.host.isAlive(lease),
    }),
  );
  return { bytes, manifest, ...images, gpuObservation, placement, hostnameOf };
}

/** batch.json's record (before its pair limit defaults): the batch's identity and what its checks found. */
async function batchRecordOf(
  deps: StartBatchDeps,
  options: StartBatchOptions,
  checked: Awaited<ReturnType<typeof checkBatch>>,
  at: { readonly host: Promise<HostFactsRecord> | undefined; readonly now: Date },
): Promise<BatchRecord> {
  const {
    manifest,
    engine,
    pins,
    planned,
    nodes: imageNodes,
    gpuObservation,
    placement,
    hostnameOf,
  } = checked;
  const executor = placement.executor ?? options.executor;
  const { host, now } = at;
  return {
    schema: BATCH_SCHEMA,
    batch_id: `e1-${now.toISOString().slice(0, 10).replace(/-/g, '')}-${randomUUID().slice(0, 8)}`,
    created_at: now.toISOString(),
    manifest_sha256: sha256Hex(checked.bytes),
    code_version: options.codeVersion,
    host_boot_id: await deps.host.bootId(),
    engine: { id: engine.id, version: engine.version, api_version: engine.apiVersion },
    registry_path: options.registryPath,
    bind_address: options.bindAddress,
    gpu_observation: gpuObservation,
    // The local executor runs each pair by the id its image had at start: a tag rebuilt later is never followed.
    ...(Object.keys(pins).length > 0 && (options.executor === undefined || options.executor.kind === 'local')
      ? { images: pins }
      : {}),
    ...(imageNodes !== undefined
      ? {
          image_nodes: Object.fromEntries(
            Object.entries(imageNodes).map(([image, nodes]) => [image, nodes.map(hostnameOf)]),
          ),
        }
      : {}),
    ...(Object.keys(planned).length > 0
      ? {
          image_plan: imagePlanRecord(
            manifest,
            planned,
            host !== undefined ? dataRootFree(await host) : null,
            options.pruneOwnImages === true,
            executor?.kind === 'swarm' ? Object.keys(executor.node_engines) : undefined,
          ),
        }
      : {}),
    ...(options.allowShortSecrets === true ? { allow_short_secrets: true } : {}),
    ...(options.mountRoots !== undefined && options.mountRoots.length > 0
      ? { mount_roots: await Promise.all(options.mountRoots.map((r) => resolveReal(deps.fs, r))) }
      : {}),
    ...checked.placement,
    ...(host !== undefined ? { host: await host } : {}),
  };
}

/** The defaults of the batch's pairs from the host at start (a swarm's pairs run elsewhere: the fixed fallbacks). */
export function batchLimitDefaults(
  manifest: Manifest,
  host: HostFactsRecord | undefined,
  swarm: boolean,
): LimitDefaults {
  const memory = !swarm && host?.memory.kind === 'known' ? host.memory.total_bytes : null;
  const free = !swarm && host?.output_fs.kind === 'known' ? host.output_fs.free_bytes : null;
  return limitDefaults({
    memoryTotalBytes: memory,
    outputFreeBytes: free,
    maxConcurrentPairs: manifest.capacity.max_workers,
  });
}

/**
 * `start` warns when the default disk limit (a share of the free space) is low and some job relies on it; `doctor`
 * always shows it.
 */
function warnDefaultDiskLimit(
  manifest: Manifest,
  limits: LimitDefaults,
  warn: ((message: string) => void) | undefined,
): void {
  const defaulted = manifest.jobs.filter((j) => j.disk_limit_bytes === undefined).length;
  if (defaulted === 0 || warn === undefined || limits.disk_limit_bytes >= LOW_DISK_LIMIT_BYTES) return;
  warn(
    `${defaulted} job(s) without disk_limit_bytes: each pair may add only ${limits.disk_limit_bytes} bytes to its cwd, outcome folder and writable layer (low free space on the output file system: free space, or set disk_limit_bytes); ${limits.basis}`,
  );
}
