import { RECEIPT_FILE, RESULT_FILE } from '../core/evidence-names.js';
import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { EvidenceStore } from './evidence/evidence-store.js';
import type { FileSystem } from './ports/file-system.js';
import { bindAddressProblem } from '../core/bind-address.js';
import { InvalidInputError, RoboguideError, type Issue } from '../core/errors.js';
import { jsonErrorSummary, parsePairSpec } from '../core/manifest/parse.js';
import { jobPathIssues, staleOutcomeIssues } from './job-paths.js';
import { DEFAULT_SESSIONS_DIR, DEFAULT_STOP_BUDGET_SECONDS } from '../core/manifest/constants.js';
import { resolveEnvironment } from '../core/manifest/environment.js';
import type { PairSpec } from '../core/manifest/schema.js';
import { buildReceipt, type Receipt } from '../core/receipt.js';
import type { ResultRecord } from '../core/result.js';
import { wallDeadlineMs } from '../core/wall-budget.js';
import {
  effectiveLimits,
  limitDefaults,
  LOW_DISK_LIMIT_BYTES,
  type PairLimits,
} from '../core/pair-limits.js';
import { writeJsonVerified } from './durable-write.js';
import { imagesMissing } from './image-missing.js';
import { DEFAULT_RUNTIME, gvisorSessionsDirProblem, isGvisor, runtimeProblem } from '../core/oci-runtime.js';
import { executePair } from './execute-pair.js';
import { admitOnePair } from './admission.js';
import type { CapacityRegistry } from './ports/capacity-registry.js';
import { reconcilePair, type ReconcileReport } from './reconcile-pair.js';
import type { RunPairDeps, RunPairOptions, RunPairOutcome } from './run-pair-types.js';

function parseSpec(text: string, source: string): PairSpec {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    // Never the parser's message: it quotes the input, which may hold a secret.
    throw new InvalidInputError('E_SPEC_INVALID', `pair spec ${source} is invalid`, [
      { path: '$', rule: `is not valid JSON: ${jsonErrorSummary(err)}` },
    ]);
  }
  const parsed = parsePairSpec(value);
  if (!parsed.ok)
    throw new InvalidInputError('E_SPEC_INVALID', `pair spec ${source} is invalid`, parsed.issues);
  return parsed.spec;
}

/** Bind address, a stale or linked outcome path, and the mount rules; each problem at its field. */
async function specPathIssues(
  fs: FileSystem,
  spec: PairSpec,
  output: string,
  options: RunPairOptions,
): Promise<Issue[]> {
  const issues: Issue[] = [];
  const bind =
    options.hostAddresses === undefined
      ? null
      : bindAddressProblem(options.bindAddress, options.hostAddresses);
  if (bind !== null) issues.push({ path: '--bind-address', rule: bind });
  issues.push(...(await staleOutcomeIssues(fs, [{ prefix: '', outcome_path: spec.outcome_path }])));
  // Asked only for a spec that parsed (the engine's data root: an invalid spec never loads the engine client).
  const hostPaths = typeof options.hostPaths === 'function' ? await options.hostPaths() : options.hostPaths;
  const protectedPaths = {
    ...hostPaths,
    outputDir: output,
    ...(options.registryPath !== undefined ? { registryPath: options.registryPath } : {}),
    ...(options.mountRoots !== undefined ? { mountRoots: options.mountRoots } : {}),
  };
  issues.push(
    ...(await jobPathIssues(
      fs,
      [{ prefix: '', cwd: spec.cwd, outcome_path: spec.outcome_path }],
      protectedPaths,
    )),
  );
  return issues;
}

function defaultOutput(cwd: string, jobId: string, now: Date): string {
  const stamp = now.toISOString().replace(/[-:]/g, '').replace(/\..*$/, '');
  return resolve(cwd, `roboguide-pair-${jobId}-${stamp}`);
}

/** A spec that passed every check before anything is written: its values, where its evidence goes, the receipt's code version. */
interface CheckedSpec {
  readonly spec: PairSpec;
  readonly environment: { readonly values: Record<string, string>; readonly secrets: string[] };
  readonly output: string;
  readonly now: Date;
  readonly codeVersion: string;
}

/** Everything `pair run` checks before it takes a slot: the spec, its variables, its paths, the image on the engine. */
async function checkSpec(deps: RunPairDeps, options: RunPairOptions): Promise<CheckedSpec> {
  const spec = parseSpec(options.specText, options.specSource);
  const resolved = resolveEnvironment(spec.environment, options.environment, 'environment', {
    allowShortSecrets: options.allowShortSecrets === true,
  });
  if (!resolved.ok)
    throw new InvalidInputError(
      'E_ENV_MISSING',
      'the pair spec references variables that are not set or not usable',
      resolved.issues,
    );
  // The host's staging probe (a bind of a folder of ours, once per process; the receipt records its answer) runs
  // beside the engine's questions below instead of after them (issue 39): a spec that parsed only, nothing of the
  // user's is touched, and its answer is awaited where the receipt is built.
  deps.mountStager?.mode().catch(() => undefined);
  const now = deps.clock.now();
  const output = resolve(options.cwd, options.output ?? defaultOutput(options.cwd, spec.job_id, now));
  const issues = await specPathIssues(deps.fs, spec, output, options);
  if (issues.length > 0)
    throw new InvalidInputError('E_SPEC_INVALID', `pair spec ${options.specSource} is invalid`, issues);
  for (const warning of resolved.warnings) options.onWarning?.(warning);
  const codeVersion =
    typeof options.codeVersion === 'function' ? options.codeVersion() : Promise.resolve(options.codeVersion);
  codeVersion.catch(() => undefined); // awaited below, once the engine checks passed (not an unhandled rejection meanwhile)
  // The image on the engine: exit 3 when no engine answers, before anything is written.
  if (!(await deps.runtime.imageExists(spec.image))) {
    throw imagesMissing(
      [spec.image],
      new Map([[spec.image, [spec.job_id]]]),
      options.bin ?? 'roboguide-eval',
    );
  }
  await checkRuntime(deps.runtime, spec, options.specSource);
  // Before a slot is taken: nothing to give back if it fails.
  return { spec, environment: resolved, output, now, codeVersion: await codeVersion };
}

/**
 * A runtime other than "runc" must be registered with the engine (and GPUs under gVisor need its GPU proxy): exit 2
 * naming it and the engine's runtimes, before anything is written. "runc" needs no check.
 */
async function checkRuntime(
  runtime: RunPairDeps['runtime'],
  spec: PairSpec,
  specSource: string,
): Promise<void> {
  if (spec.runtime === undefined || spec.runtime === DEFAULT_RUNTIME) return;
  const engine = await runtime.info();
  const registered = engine.runtimeDetails ?? engine.runtimes.map((name) => ({ name, path: '', args: [] }));
  const problem = runtimeProblem(spec.runtime, registered, spec.gpus !== undefined);
  const gvisor = registered.find((r) => r.name === spec.runtime);
  const sessions =
    problem === null && gvisor !== undefined && isGvisor(gvisor)
      ? gvisorSessionsDirProblem(spec.sessions_dir)
      : null;
  const issues = [
    ...(problem !== null ? [{ path: 'runtime', rule: problem }] : []),
    ...(sessions !== null ? [{ path: 'sessions_dir', rule: sessions }] : []),
  ];
  if (issues.length > 0)
    throw new InvalidInputError(
      'E_SPEC_INVALID',
      `pair spec ${specSource} cannot run on this engine`,
      issues,
    );
}

interface PairClaim {
  readonly batchId: string;
  readonly claimId: string;
  readonly reservationId: string;
  /** The spec as admitted: on a swarm, pinned to the node its slot is on. */
  readonly job: PairSpec;
}

/** A slot in the registry, like a batch pair's (per node on a swarm); a refusal is an error naming what holds it. */
async function admitPair(
  deps: RunPairDeps,
  registry: CapacityRegistry,
  spec: PairSpec,
  specSource: string,
  claimId: string,
  output: string,
): Promise<PairClaim> {
  const batchId = `pair-run-${claimId.slice(0, 8)}`;
  const { admitted, job } = await admitOnePair(
    registry,
    deps.nodes,
    { batchId, claimId, ports: spec.ports, writableMounts: [spec.cwd], evidenceFolder: output },
    spec,
    specSource,
  );
  if (admitted.kind === 'refused' && admitted.reason === 'port_held') {
    throw new RoboguideError(
      'E_REGISTRY',
      `port ${admitted.port ?? '?'} is held on node ${admitted.node} by batch ${admitted.holderBatchId ?? '?'}: not started`,
      {
        suggestions: [
          'wait for that pair to finish (`roboguide-eval capacity` shows it)',
          'or choose another port',
        ],
      },
    );
  }
  if (admitted.kind === 'refused' && admitted.reason === 'mount_nested') {
    throw new RoboguideError(
      'E_REGISTRY',
      `cwd: ${admitted.source ?? spec.cwd} lies inside, or holds, ${admitted.heldSource ?? '?'}, the writable mount of a running container (batch ${admitted.holderBatchId ?? '?'}): not started`,
      {
        suggestions: [
          'wait for that container to finish (`roboguide-eval capacity` shows it)',
          'or use a folder apart',
        ],
      },
    );
  }
  if (admitted.kind === 'refused') {
    const what =
      admitted.reason === 'gpu_budget'
        ? `GPU budget (${admitted.held} of ${admitted.limit} MiB held)`
        : `capacity limit (${admitted.held} of ${admitted.limit} held)`;
    throw new RoboguideError('E_CAPACITY', `the host is at its ${what}: not started`, {
      suggestions: [
        'wait for running pairs to finish (`roboguide-eval capacity` shows them)',
        'or raise the limit: `roboguide-eval capacity --max-reservations N`',
      ],
    });
  }
  return { batchId, claimId, reservationId: admitted.reservationId, job };
}

/**
 * The output directory and the exclusive receipt. Nothing ran yet: any failure here gives the slot back before it
 * is reported.
 */
async function claimPair(
  deps: RunPairDeps,
  registry: CapacityRegistry,
  claim: PairClaim,
  output: string,
  receipt: Receipt,
): Promise<EvidenceStore> {
  const release = async (): Promise<void> => {
    await registry.release(claim.reservationId, claim.claimId);
  };
  let published: 'published' | 'exists';
  const store = new EvidenceStore(deps.fs, output);
  try {
    await EvidenceStore.createOutputDir(deps.fs, output);
    published = await store.publishExclusive(RECEIPT_FILE, receipt);
  } catch (err) {
    await release();
    throw err;
  }
  if (published === 'exists') {
    await release();
    throw new RoboguideError(
      'E_CLAIM_EXISTS',
      `${output}/receipt.json already exists: this pair was claimed`,
    );
  }
  return store;
}

/**
 * `pair run`: one pair in the foreground with the batch lifecycle and the same evidence (receipt, logs,
 * sessions, result.json) in its own output directory. Validates everything before writing anything.
 */
export async function runPair(deps: RunPairDeps, options: RunPairOptions): Promise<RunPairOutcome> {
  const { spec, environment, output, now, codeVersion } = await checkSpec(deps, options);
  const registry = typeof deps.registry === 'function' ? await deps.registry() : deps.registry;
  const claim = await admitPair(deps, registry, spec, options.specSource, randomUUID(), output);
  const receipt = buildReceipt({
    batchId: claim.batchId,
    jobId: spec.job_id,
    claimId: claim.claimId,
    claimedAt: now,
    supervisor: await deps.host.current(),
    reservationId: claim.reservationId,
    image: spec.image,
    outcomePath: spec.outcome_path,
    sourceSha256: {},
    codeVersion,
    network: spec.network,
    egress: spec.egress,
    runtime: spec.runtime ?? DEFAULT_RUNTIME,
    mountMode: (await deps.mountStager?.mode()) ?? 'walked',
    ...(options.registryRecord !== undefined ? { registryPath: options.registryRecord } : {}),
  });
  const limits = await pairRunLimits(deps, spec, output, options.onWarning);
  const store = await claimPair(deps, registry, claim, output, receipt);
  options.onClaimed?.();
  let current = receipt;
  const stopBudgetSec = options.stopBudgetSec ?? spec.stop_budget_seconds ?? DEFAULT_STOP_BUDGET_SECONDS;
  options.onStopBudget?.(stopBudgetSec);
  const { result } = await executePair(deps, {
    store,
    jobRel: '.',
    batchId: claim.batchId,
    claimId: claim.claimId,
    job: { ...claim.job, runtime: claim.job.runtime ?? DEFAULT_RUNTIME },
    environment: environment.values,
    secrets: environment.secrets,
    sessionsDir: spec.sessions_dir ?? DEFAULT_SESSIONS_DIR,
    stopBudgetSec,
    deadlineMs: wallDeadlineMs(now.getTime(), spec.timeout_seconds), // from the claim, like a batch pair's
    bindAddress: options.bindAddress,
    allowedHttpStatuses: spec.allowed_http_statuses ?? [],
    readOutcome: (path) => deps.outcomes.read(path),
    mountRules: {
      ...(options.registryPath !== undefined ? { registryPath: options.registryPath } : {}),
      ...(options.mountRoots !== undefined ? { mountRoots: options.mountRoots } : {}),
    },
    limits,
    ...(options.terminate ? { terminate: options.terminate } : {}),
    ...(options.killNow ? { killNow: options.killNow } : {}),
    onCreated: async (containerId) => {
      current = { ...current, container_id: containerId };
      await store.writeJsonAtomic(RECEIPT_FILE, current);
      await registry.attachContainer(claim.reservationId, containerId);
    },
  }).catch(async (err: unknown) => {
    // Until a container exists, a failure means nothing ran: give the slot back before reporting it.
    if (current.container_id === null) await registry.release(claim.reservationId, claim.claimId);
    throw err;
  });
  return {
    output,
    receipt: current,
    result,
    reconciliation: await finishPairRun(deps, registry, store, claim, result),
  };
}

/** The spec's limits over the defaults of this host for one pair; a low default disk limit is said (like `start`). */
async function pairRunLimits(
  deps: RunPairDeps,
  spec: PairSpec,
  output: string,
  warn: ((message: string) => void) | undefined,
): Promise<PairLimits> {
  const basis = (await deps.limitBasis?.(output).catch(() => null)) ?? {
    memoryTotalBytes: null,
    outputFreeBytes: null,
  };
  const defaults = limitDefaults({ ...basis, maxConcurrentPairs: 1 });
  if (spec.disk_limit_bytes === undefined && defaults.disk_limit_bytes < LOW_DISK_LIMIT_BYTES) {
    warn?.(
      `no disk_limit_bytes: the pair may hold only ${defaults.disk_limit_bytes} bytes (low free space on the output file system); ${defaults.basis}`,
    );
  }
  return effectiveLimits(spec, defaults);
}

/** result.json, then terminal reconciliation (which gives the slot back once the evidence proves the pair finished). */
async function finishPairRun(
  deps: RunPairDeps,
  registry: CapacityRegistry,
  store: EvidenceStore,
  claim: PairClaim,
  result: ResultRecord,
): Promise<ReconcileReport> {
  const written = await writeJsonVerified(store, RESULT_FILE, result);
  if (written.kind === 'failed') {
    // Fail closed: the container is gone, but without a result on disk nothing may release the slot.
    throw new RoboguideError(
      'E_STORE',
      `result.json could not be written in ${store.root}; the pair's evidence is kept and its capacity slot stays held`,
      {
        cause: written.error,
        context: { reservation_id: claim.reservationId, claim_id: claim.claimId },
      },
    );
  }
  return reconcilePair(
    { store, registry, runtime: deps.runtime, readOutcomeSha256: (path) => deps.outcomes.sha256(path) },
    { jobRel: '.', mode: 'execute' },
  );
}
