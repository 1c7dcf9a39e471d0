import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { EvidenceStore } from '../evidence/evidence-store.js';
import type { FileSystem } from '../ports/file-system.js';
import { bindAddressProblem } from '../../core/bind-address.js';
import { InternalError, InvalidInputError, RoboguideError, type Issue } from '../../core/errors.js';
import { jsonErrorSummary, parsePairSpec } from '../../core/manifest/parse.js';
import { jobPathIssues, staleOutcomeIssues } from '../job-paths.js';
import { DEFAULT_SESSIONS_DIR, DEFAULT_STOP_BUDGET_SECONDS } from '../../core/manifest/constants.js';
import { resolveEnvironment } from '../../core/manifest/environment.js';
import type { PairSpec } from '../../core/manifest/schema.js';
import {
  effectiveLimits,
  limitDefaults,
  LOW_DISK_LIMIT_BYTES,
  type PairLimits,
} from '../../core/pair-limits.js';
import { imagesMissing } from '../image-missing.js';
import {
  DEFAULT_RUNTIME,
  gvisorSessionsDirProblem,
  isGvisor,
  runtimeProblem,
} from '../../core/oci-runtime.js';
import { onePairAdmission } from '../admission.js';
import type { CapacityRegistry } from '../ports/capacity-registry.js';
import { canPrepareNetworks } from '../ports/runtime-capabilities.js';
import type { RunPairDeps, RunPairOptions, RunPairOutcome } from './run-pair-types.js';
import { runClaimedPair } from './claimed-pair.js';
import { admissionRefused } from './admit.js';
import type { PairPlan } from './claimed-pair-types.js';

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
  // The receipt's code version (dist/build-info.json) read beside the checks below, not after them (issue 39); awaited
  // once the engine checks passed (its rejection is not left unhandled meanwhile).
  const codeVersion =
    typeof options.codeVersion === 'function' ? options.codeVersion() : Promise.resolve(options.codeVersion);
  codeVersion.catch(() => undefined);
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
  // The image's inspect is asked beside the path checks (which wait for the engine's info) and its answer read only
  // once they passed: a spec's own faults are still reported first (issue 39).
  const imagePresent = deps.runtime.imageExists(spec.image);
  imagePresent.catch(() => undefined);
  const issues = await specPathIssues(deps.fs, spec, output, options);
  if (issues.length > 0)
    throw new InvalidInputError('E_SPEC_INVALID', `pair spec ${options.specSource} is invalid`, issues);
  for (const warning of resolved.warnings) options.onWarning?.(warning);
  // The image on the engine: exit 3 when no engine answers, before anything is written.
  if (!(await imagePresent)) {
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

/**
 * `pair run`: one pair in the foreground with the batch lifecycle and the same evidence (receipt, logs,
 * sessions, result.json) in its own output directory. Validates everything before writing anything, then runs the
 * claimed pair (src/app/pair/claimed-pair.ts): a refusal, a failed claim or an unwritten result is an error.
 */
export async function runPair(deps: RunPairDeps, options: RunPairOptions): Promise<RunPairOutcome> {
  const checked = await checkSpec(deps, options);
  // The guarded network's listing of its rules, which the create takes (issue 39), begun once the spec passed every
  // check (a refused one touches no firewall) and run beside the admission and the receipt: the firewall is read, and
  // what is missing of ours made, as that create would. Never fails by its contract; the create finds what went wrong.
  const runtime = deps.runtime;
  if (canPrepareNetworks(runtime)) {
    try {
      runtime.prepareNetwork(checked.spec.network);
    } catch {
      // the create lists for itself
    }
  }
  const registry = typeof deps.registry === 'function' ? await deps.registry() : deps.registry;
  const plan = await pairRunPlan(deps, registry, checked, options);
  const store = new EvidenceStore(deps.fs, checked.output);
  const outcome = await runClaimedPair({ store, registry, execute: deps }, plan, {
    onClaimed: () => {
      options.onClaimed?.();
      options.onStopBudget?.(plan.stopBudgetSec);
    },
    onRunning: (handle) => {
      follow(options.terminate, handle.terminate);
      follow(options.killNow, handle.killNow);
    },
  });
  // `onAdmitRefused: 'throw'` threw a refusal already; the type still says it may return one.
  if (outcome.kind === 'refused') throw admissionRefused(outcome.admitted, checked.spec.cwd);
  if (outcome.kind === 'claim_failed') {
    if (outcome.reason === 'receipt_write_failed') throw outcome.error;
    throw new RoboguideError(
      'E_CLAIM_EXISTS',
      `${checked.output}/receipt.json already exists: this pair was claimed`,
    );
  }
  if (outcome.finish.kind !== 'reconciled') throw new InternalError('an unwritten result is thrown');
  return {
    output: checked.output,
    receipt: outcome.receipt,
    result: outcome.result,
    reconciliation: outcome.finish.report,
  };
}

/** An outside signal passed to the pair's own controller (now when it was aborted already). */
function follow(signal: AbortSignal | undefined, controller: AbortController): void {
  if (signal === undefined) return;
  if (signal.aborted) controller.abort();
  else signal.addEventListener('abort', () => controller.abort(), { once: true });
}

/** The checked spec as a claimed-pair plan: a slot like a batch pair's (per node on a swarm); refusals throw. */
async function pairRunPlan(
  deps: RunPairDeps,
  registry: CapacityRegistry,
  checked: CheckedSpec,
  options: RunPairOptions,
): Promise<PairPlan> {
  const { spec, environment, output, codeVersion } = checked;
  const claimId = randomUUID();
  const batchId = `pair-run-${claimId.slice(0, 8)}`;
  const admission = await onePairAdmission(
    registry,
    deps.nodes,
    { batchId, claimId, ports: spec.ports, writableMounts: [spec.cwd], evidenceFolder: output },
    spec,
    options.specSource,
  );
  const runtime = spec.runtime ?? DEFAULT_RUNTIME;
  return {
    batchId,
    claimId,
    job: { ...spec, runtime },
    admission,
    receipt: {
      image: spec.image,
      outcomePath: spec.outcome_path,
      sourceSha256: {},
      codeVersion,
      network: spec.network,
      egress: spec.egress,
      runtime,
      ...(options.registryRecord !== undefined ? { registryPath: options.registryRecord } : {}),
    },
    jobRel: '.',
    createsRoot: true,
    environment: { values: environment.values, secrets: environment.secrets },
    sessionsDir: spec.sessions_dir ?? DEFAULT_SESSIONS_DIR,
    stopBudgetSec: options.stopBudgetSec ?? spec.stop_budget_seconds ?? DEFAULT_STOP_BUDGET_SECONDS,
    // The wall budget runs from the claim, like a batch pair's.
    timeoutSeconds: spec.timeout_seconds,
    bindAddress: options.bindAddress,
    allowedHttpStatuses: spec.allowed_http_statuses ?? [],
    mountRules: {
      ...(options.registryPath !== undefined ? { registryPath: options.registryPath } : {}),
      ...(options.mountRoots !== undefined ? { mountRoots: options.mountRoots } : {}),
    },
    limits: () => pairRunLimits(deps, spec, output, options.onWarning),
    onAdmitRefused: 'throw',
    onResultUnwritten: 'throw',
    resumeFinishesClaim: false,
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
