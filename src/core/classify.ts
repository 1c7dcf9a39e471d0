import { reasonOfEngineFault, type EngineFault } from './engine-fault.js';
import type { EngineLoss } from './engine-loss.js';
import type { OutcomeCheck } from './outcome.js';
import type { Classification, Reason } from './result.js';
import { isObject, own, type JsonObject } from './json-object.js';

/**
 * Classification of a finished pair (SPEC §5). Pure: the use-case gathers what it observed
 * (outcome check, timeout, engine and harness faults) and gets back a classification with every
 * observed reason. Arm verdicts are never inspected: ordinary failures are `completed`.
 */

export type HarnessFault =
  | 'log_write_failed'
  | 'receipt_write_failed'
  | 'result_write_failed'
  | 'cleanup_unverified'
  | 'lost_worker'
  | 'evidence_write_failed';

export interface ClassifyInput {
  readonly jobId: string;
  readonly outcome: OutcomeCheck;
  readonly timedOut: boolean;
  /** A log reached its `log_limit_bytes` and the pair was stopped for it. */
  readonly logLimitExceeded?: boolean;
  /** The kernel's OOM killer killed a process of the container (its memory limit; `State.OOMKilled`). */
  readonly oomKilled?: boolean;
  /** The pair's cwd, outcome folder and writable layer went past `disk_limit_bytes` (it was stopped for it). */
  readonly diskLimitExceeded?: boolean;
  /** The pair's disk could not be measured (src/core/disk-rule.ts): stopped for it, failing closed. */
  readonly diskUnmeasurable?: boolean;
  /** Bytes of a log are known to be missing from its file (the engine's copy could not be read in full). */
  readonly logIncomplete?: boolean;
  /** The operator stopped the pair (`stop --terminate`). */
  readonly terminated: boolean;
  /** The engine refused or failed a call of the pair (`engine_unavailable` is reported as `engine_error`). */
  readonly engineFault: EngineFault | null;
  /** The engine went away while the pair ran and what was found when it answered again (or that it never did). */
  readonly engineLoss?: EngineLoss | null;
  readonly harnessFaults: readonly HarnessFault[];
  /** The launch-time mount check refused the pair's cwd (src/app/pair/mount-guard.ts): no container ran with it. */
  readonly mountRefused?: boolean;
  /** HTTP statuses the driver may continue after; empty = none allowed. */
  readonly allowedHttpStatuses: readonly number[];
}

export interface Classified {
  readonly classification: Classification;
  readonly reasons: Reason[];
}

type FailureClass = Exclude<Classification, 'completed'>;

/**
 * The classification each reason leads to, strongest class first (fatal > harness_failure >
 * provider_stop > infrastructure_failure). Typed as a full record, so a new `Reason` word does
 * not compile until it is given a class. Reasons are listed in this key order, so the first
 * reason always names the cause of the classification.
 */
const CLASS_OF_REASON: Readonly<Record<Reason, FailureClass>> = {
  fatal_failure_flag: 'fatal',
  job_id_mismatch: 'fatal',
  lost_worker: 'harness_failure',
  // The pair ended, but its result.json could not be written on the evidence disk (ENOSPC, EIO…): rebuilt on resume
  // from the evidence on disk instead of being taken for a lost worker (issue 27).
  evidence_write_failed: 'harness_failure',
  log_write_failed: 'harness_failure',
  receipt_write_failed: 'harness_failure',
  result_write_failed: 'harness_failure',
  cleanup_unverified: 'harness_failure',
  provider_requires_stop: 'provider_stop',
  provider_status_not_allowed: 'provider_stop',
  timeout: 'infrastructure_failure',
  // A budget the pair overran, like the wall clock: the pair's own behaviour, not a fault of the harness, so the
  // batch goes on (a streak of them pauses it, as for any infrastructure failure).
  log_limit_exceeded: 'infrastructure_failure',
  // The same for memory and disk (issue 22): the pair went past its own limit. The tool's evidence is whole and the
  // other pairs are untouched, so neither harness nor fatal; like a timeout, a streak of them pauses the batch.
  oom_killed: 'infrastructure_failure',
  disk_limit_exceeded: 'infrastructure_failure',
  // Its disk could not be measured (a walk past its budget, open files that could not be read): the limit cannot
  // be shown to hold, so the pair is stopped and not scored as completed (fail closed), classed like the limit.
  disk_unmeasurable: 'infrastructure_failure',
  // The engine's copy of the output could not be read in full (rotated away, altered, or it stopped giving bytes):
  // the evidence has a named gap; not a fault of the harness's own writes.
  log_incomplete: 'infrastructure_failure',
  terminated: 'infrastructure_failure',
  // A mount the launch-time check refused (a link, a foreign owner, a protected real path, a folder swapped after the
  // check): no container ran with it; the batch goes on.
  mount_refused: 'infrastructure_failure',
  port_allocated: 'infrastructure_failure',
  nvidia_runtime_missing: 'infrastructure_failure',
  // The engine accepted a GPU request and dropped it (Podman 4 with DeviceRequests, a runtime that ignores it): the
  // pair never ran, so it is not scored as if it had a GPU.
  gpu_request_dropped: 'infrastructure_failure',
  image_missing: 'infrastructure_failure',
  // Issue 43: the pair's image could not be pulled (after retries): the registry's message is the engine error's.
  image_pull_failed: 'infrastructure_failure',
  engine_error: 'infrastructure_failure',
  engine_restarted: 'infrastructure_failure',
  container_vanished: 'infrastructure_failure',
  engine_unreachable: 'infrastructure_failure',
  node_lost: 'infrastructure_failure',
  outcome_missing: 'infrastructure_failure',
  outcome_unparseable: 'infrastructure_failure',
  outcome_invalid: 'infrastructure_failure',
  outcome_too_large: 'infrastructure_failure',
  outcome_too_deep: 'infrastructure_failure',
  infrastructure_failure_flag: 'infrastructure_failure',
};

/** Every reason word in its stable position. */
export const REASON_ORDER: readonly Reason[] = Object.keys(CLASS_OF_REASON) as Reason[];

/** The classification a single reason leads to. */
export function classOfReason(reason: Reason): FailureClass {
  return CLASS_OF_REASON[reason];
}

function rawOf(check: OutcomeCheck): unknown {
  return check.kind === 'valid' || check.kind === 'invalid' ? check.raw : undefined;
}

function incidentsOf(raw: JsonObject): readonly unknown[] {
  const attempt = own(raw, 'e1_attempt');
  if (!isObject(attempt)) return [];
  const incidents = own(attempt, 'provider_incidents');
  return Array.isArray(incidents) ? (incidents as readonly unknown[]) : [];
}

function providerReasons(raw: JsonObject, allowed: readonly number[]): Reason[] {
  const reasons: Reason[] = [];
  for (const incident of incidentsOf(raw)) {
    if (!isObject(incident)) continue;
    if (own(incident, 'requires_stop') === true) reasons.push('provider_requires_stop');
    const status = own(incident, 'http_status');
    if (typeof status === 'number' && !allowed.includes(status)) reasons.push('provider_status_not_allowed');
  }
  return reasons;
}

/**
 * What the outcome itself says. Each signal is read only where it has the right type, so an
 * outcome that breaks the contract elsewhere still cannot hide a `fatal_failure: true`, a
 * foreign job id or a stop request (fail closed).
 */
function outcomeReasons(check: OutcomeCheck, input: ClassifyInput): Reason[] {
  const reasons: Reason[] = [];
  if (check.kind === 'missing') reasons.push('outcome_missing');
  if (check.kind === 'unparseable') reasons.push('outcome_unparseable');
  if (check.kind === 'invalid') reasons.push('outcome_invalid');
  if (check.kind === 'too_large') reasons.push('outcome_too_large');
  if (check.kind === 'too_deep') reasons.push('outcome_too_deep');
  const raw = rawOf(check);
  if (!isObject(raw)) return reasons;
  if (own(raw, 'fatal_failure') === true) reasons.push('fatal_failure_flag');
  if (own(raw, 'infrastructure_failure') === true) reasons.push('infrastructure_failure_flag');
  const jobId = own(raw, 'job_id');
  if (typeof jobId === 'string' && jobId !== input.jobId) reasons.push('job_id_mismatch');
  reasons.push(...providerReasons(raw, input.allowedHttpStatuses));
  return reasons;
}

function observedReasons(input: ClassifyInput): Reason[] {
  const reasons: Reason[] = [...outcomeReasons(input.outcome, input), ...input.harnessFaults];
  if (input.timedOut) reasons.push('timeout');
  if (input.logLimitExceeded === true) reasons.push('log_limit_exceeded');
  if (input.oomKilled === true) reasons.push('oom_killed');
  if (input.diskLimitExceeded === true) reasons.push('disk_limit_exceeded');
  if (input.diskUnmeasurable === true) reasons.push('disk_unmeasurable');
  if (input.logIncomplete === true) reasons.push('log_incomplete');
  if (input.terminated) reasons.push('terminated');
  if (input.mountRefused === true) reasons.push('mount_refused');
  if (input.engineFault !== null) reasons.push(reasonOfEngineFault(input.engineFault));
  if (input.engineLoss !== undefined && input.engineLoss !== null) reasons.push(input.engineLoss);
  return reasons;
}

export function classify(input: ClassifyInput): Classified {
  const observed = new Set(observedReasons(input));
  const reasons = REASON_ORDER.filter((r) => observed.has(r));
  const first = reasons[0];
  return { classification: first === undefined ? 'completed' : classOfReason(first), reasons };
}
