import { randomUUID } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { currentProcessIdentity } from '../adapters/host-identity.js';
import { readOutcomeFile, readOutcomeSha256 } from '../adapters/outcome-reader.js';
import { EvidenceStore } from './evidence/evidence-store.js';
import type { FileSystem } from './ports/file-system.js';
import { bindAddressProblem } from '../core/bind-address.js';
import { InvalidInputError, RoboguideError, ExitCode, type Issue } from '../core/errors.js';
import { jsonErrorSummary } from '../core/manifest/parse.js';
import type { ProtectedPaths } from '../core/mount-policy.js';
import { jobPathIssues } from './job-paths.js';
import {
  DEFAULT_SESSIONS_DIR,
  DEFAULT_STOP_BUDGET_SECONDS,
  parsePairSpec,
  resolveEnvironment,
  type PairSpec,
} from '../core/manifest/index.js';
import { containerName, privateOutcomeRel, RECEIPT_SCHEMA, type Receipt } from '../core/receipt.js';
import type { ResultRecord } from '../core/result.js';
import { wallDeadlineMs } from '../core/wall-budget.js';
import { writeJsonVerified } from './durable-write.js';
import { executePair, type ExecutePairDeps } from './execute-pair.js';
import { admitOnePair } from './admission.js';
import type { CapacityRegistry } from './ports/capacity-registry.js';
import { reconcilePair, type ReconcileReport } from './reconcile-pair.js';

export interface RunPairOptions {
  readonly specText: string;
  readonly specSource: string;
  readonly output?: string;
  readonly bindAddress: string;
  readonly stopBudgetSec?: number;
  readonly environment: Readonly<Record<string, string | undefined>>;
  /**
   * For the receipt. A function is called once the spec passed every check, so that reading it (git, in the CLI)
   * runs alongside the engine checks instead of before them.
   */
  readonly codeVersion: string | (() => Promise<string>);
  readonly cwd: string;
  /** The host's IP addresses: when given, `bindAddress` must be one of them (or 0.0.0.0 / ::). */
  readonly hostAddresses?: readonly string[];
  /** $HOME and the engine's sockets: never mounted (the output directory and the registry always count). */
  readonly hostPaths?: Pick<ProtectedPaths, 'homeDir' | 'engineSocketPaths'>;
  /** The registry database file, for the mount rules (a pair must never reach it). */
  readonly registryPath?: string;
  /** Accept `${NAME}` values shorter than 8 characters (masked anyway, with a warning). */
  readonly allowShortSecrets?: boolean;
  readonly onWarning?: (message: string) => void;
  /** Aborting it performs the controlled stop (SIGTERM, stop budget, kill); collection and removal still run. */
  readonly terminate?: AbortSignal;
}

export interface RunPairDeps extends ExecutePairDeps {
  readonly fs: FileSystem;
  /**
   * The host registry: a pair run takes a slot like a batch pair and gives it back through reconciliation.
   * A function is called only once the spec passed every check (the registry is not touched before).
   */
  readonly registry: CapacityRegistry | (() => Promise<CapacityRegistry>);
}

export interface RunPairOutcome {
  readonly output: string;
  readonly receipt: Receipt;
  readonly result: ResultRecord;
  /** How the slot was given back (`committed`), or why it is still held. */
  readonly reconciliation: ReconcileReport;
}

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
  if (!parsed.ok) throw new InvalidInputError('E_SPEC_INVALID', `pair spec ${source} is invalid`, parsed.issues);
  return parsed.spec;
}

/** Bind address, a stale or linked outcome path, and the mount rules; each problem at its field. */
async function specPathIssues(fs: FileSystem, spec: PairSpec, output: string, options: RunPairOptions): Promise<Issue[]> {
  const issues: Issue[] = [];
  const bind = options.hostAddresses === undefined ? null : bindAddressProblem(options.bindAddress, options.hostAddresses);
  if (bind !== null) issues.push({ path: '--bind-address', rule: bind });
  try {
    await fs.lstat(spec.outcome_path); // lstat: a dangling symlink is there too
    issues.push({ path: 'outcome_path', rule: "already exists: it would be replaced by this run's outcome; move it away first" });
  } catch {
    // absent, as it must be
  }
  const protectedPaths = { ...options.hostPaths, outputDir: output, ...(options.registryPath !== undefined ? { registryPath: options.registryPath } : {}) };
  issues.push(...(await jobPathIssues(fs, [{ prefix: '', cwd: spec.cwd, outcome_path: spec.outcome_path }], protectedPaths)));
  return issues;
}

function defaultOutput(cwd: string, jobId: string, now: Date): string {
  const stamp = now.toISOString().replace(/[-:]/g, '').replace(/\..*$/, '');
  return resolve(cwd, `roboguide-pair-${jobId}-${stamp}`);
}

/**
 * `pair run`: one pair in the foreground with the batch lifecycle and the same evidence (receipt, logs,
 * sessions, result.json) in its own output directory. Validates everything before writing anything.
 */
export async function runPair(deps: RunPairDeps, options: RunPairOptions): Promise<RunPairOutcome> {
  const spec = parseSpec(options.specText, options.specSource);
  const resolved = resolveEnvironment(spec.environment, options.environment, 'environment', { allowShortSecrets: options.allowShortSecrets === true });
  if (!resolved.ok) throw new InvalidInputError('E_ENV_MISSING', 'the pair spec references variables that are not set or not usable', resolved.issues);
  const now = deps.clock.now();
  const output = resolve(options.cwd, options.output ?? defaultOutput(options.cwd, spec.job_id, now));
  const issues = await specPathIssues(deps.fs, spec, output, options);
  if (issues.length > 0) throw new InvalidInputError('E_SPEC_INVALID', `pair spec ${options.specSource} is invalid`, issues);
  for (const warning of resolved.warnings) options.onWarning?.(warning);
  const codeVersion = typeof options.codeVersion === 'function' ? options.codeVersion() : Promise.resolve(options.codeVersion);
  codeVersion.catch(() => undefined); // awaited below, once the engine checks passed (not an unhandled rejection meanwhile)
  // The first engine call: exit 3 when no engine answers, before anything is written (no separate `info`, which
  // costs the engine a full inventory).
  if (!(await deps.runtime.imageExists(spec.image))) {
    throw new RoboguideError('E_IMAGE_MISSING', `image ${spec.image} is not present on this engine`, {
      exitCode: ExitCode.runtime,
      suggestions: ['build the synthetic images with `npx roboguide-eval images build`', 'or `docker build`/`docker load` the driver image'],
    });
  }
  const codeVersionText = await codeVersion; // before a slot is taken: nothing to give back if it fails
  const registry = typeof deps.registry === 'function' ? await deps.registry() : deps.registry;

  const identity = await currentProcessIdentity();
  const claimId = randomUUID();
  const batchId = `pair-run-${claimId.slice(0, 8)}`;
  const { admitted, job } = await admitOnePair(registry, deps.runtime, { batchId, claimId, ports: spec.ports }, spec, options.specSource);
  if (admitted.kind === 'refused' && admitted.reason === 'port_held') {
    throw new RoboguideError('E_REGISTRY', `port ${admitted.port ?? '?'} is held on node ${admitted.node} by batch ${admitted.holderBatchId ?? '?'}: not started`, {
      suggestions: ['wait for that pair to finish (`roboguide-eval capacity` shows it)', 'or choose another port'],
    });
  }
  if (admitted.kind === 'refused') {
    const what = admitted.reason === 'gpu_budget' ? `GPU budget (${admitted.held} of ${admitted.limit} MiB held)` : `capacity limit (${admitted.held} of ${admitted.limit} held)`;
    throw new RoboguideError('E_REGISTRY', `the host is at its ${what}: not started`, {
      suggestions: ['wait for running pairs to finish (`roboguide-eval capacity` shows them)', 'or raise the limit: `roboguide-eval capacity --max-reservations N`'],
    });
  }
  const reservationId = admitted.reservationId;
  try {
    await mkdir(dirname(output), { recursive: true });
    await EvidenceStore.createOutputDir(deps.fs, output);
  } catch (err) {
    await registry.release(reservationId, claimId); // nothing was claimed or run
    throw err;
  }
  const store = new EvidenceStore(deps.fs, output);
  const receipt: Receipt = {
    schema: RECEIPT_SCHEMA,
    batch_id: batchId,
    job_id: spec.job_id,
    attempt: 1,
    claim_id: claimId,
    claimed_at: now.toISOString(),
    host_boot_id: identity.boot_id,
    supervisor: identity,
    reservation_id: reservationId,
    image: spec.image,
    outcome_path: spec.outcome_path,
    private_outcome: privateOutcomeRel(spec.outcome_path),
    source_sha256: {},
    code_version: codeVersionText,
    container_id: null,
    container_name: containerName(spec.job_id, claimId),
  };
  let current = receipt;
  // Until a container exists, a failure here means nothing ran: give the slot back before reporting it.
  const releaseIfNothingRan = async (): Promise<void> => {
    if (current.container_id === null) await registry.release(reservationId, claimId);
  };
  let published: 'published' | 'exists';
  try {
    published = await store.publishExclusive('receipt.json', receipt);
  } catch (err) {
    await releaseIfNothingRan();
    throw err;
  }
  if (published === 'exists') {
    await releaseIfNothingRan();
    throw new RoboguideError('E_CLAIM_EXISTS', `${output}/receipt.json already exists: this pair was claimed`);
  }
  const { result } = await executePair(deps, {
    store,
    jobRel: '.',
    batchId,
    claimId,
    job,
    environment: resolved.values,
    secrets: resolved.secrets,
    sessionsDir: spec.sessions_dir ?? DEFAULT_SESSIONS_DIR,
    stopBudgetSec: options.stopBudgetSec ?? spec.stop_budget_seconds ?? DEFAULT_STOP_BUDGET_SECONDS,
    deadlineMs: wallDeadlineMs(now.getTime(), spec.timeout_seconds), // from the claim, like a batch pair's
    bindAddress: options.bindAddress,
    allowedHttpStatuses: spec.allowed_http_statuses ?? [],
    readOutcome: readOutcomeFile,
    ...(options.terminate ? { terminate: options.terminate } : {}),
    onCreated: async (containerId) => {
      current = { ...current, container_id: containerId };
      await store.writeJsonAtomic('receipt.json', current);
      await registry.attachContainer(reservationId, containerId);
    },
  }).catch(async (err: unknown) => {
    await releaseIfNothingRan();
    throw err;
  });
  const written = await writeJsonVerified(store, 'result.json', result);
  if (written.kind === 'failed') {
    // Fail closed: the container is gone, but without a result on disk nothing may release the slot.
    throw new RoboguideError('E_STORE', `result.json could not be written in ${output}; the pair's evidence is kept and its capacity slot stays held`, {
      cause: written.error,
      context: { reservation_id: reservationId, claim_id: claimId },
    });
  }
  const reconciliation = await reconcilePair(
    { store, registry, runtime: deps.runtime, readOutcomeSha256 },
    { jobRel: '.', mode: 'execute' },
  );
  return { output, receipt: current, result, reconciliation };
}
