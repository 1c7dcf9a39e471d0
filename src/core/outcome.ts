/**
 * The driver's outcome contract (SPEC §5): the JSON file a pair's driver writes at `outcome_path`.
 *
 * Pure: an adapter reads the file and hands over what it found; this module decides whether the
 * bytes honour the contract. It never inspects or rewrites `arms` (raw verdicts stay verbatim)
 * and keeps every extra field. `raw` is the parsed JSON as it was, for result.json `outcome`.
 */
import { isObject, own } from './json-object.js';

/** Outcome files are small JSON documents: larger ones are refused unread (`outcome_too_large`). */
export const MAX_OUTCOME_BYTES = 16 * 1024 * 1024;
/** Deeper nesting is refused before parsing (`outcome_too_deep`): no step after it can overflow the stack. */
export const MAX_OUTCOME_DEPTH = 64;

/** What an adapter found at `outcome_path`. `too_large`: over MAX_OUTCOME_BYTES, not read. */
export type OutcomeRead =
  | { state: 'missing' }
  | { state: 'unreadable'; code: string }
  | { state: 'too_large'; sizeBytes: number }
  | { state: 'present'; bytes: Uint8Array };

export interface ResourceUsage {
  readonly both_arms_measured?: boolean;
  /** `null` is accepted as "not measured". */
  readonly peak_job_gpu_mib?: number | null;
  readonly [key: string]: unknown;
}

export interface ProviderIncident {
  readonly http_status: number | null;
  readonly requires_stop: boolean;
  readonly [key: string]: unknown;
}

export interface E1Attempt {
  readonly provider_incidents?: readonly ProviderIncident[];
  readonly [key: string]: unknown;
}

export interface Outcome {
  readonly job_id: string;
  readonly infrastructure_failure: boolean;
  readonly fatal_failure: boolean;
  /** Raw arm verdicts, kept verbatim: never read by this tool. */
  readonly arms: unknown;
  readonly resource_usage?: ResourceUsage;
  readonly e1_attempt?: E1Attempt;
  readonly [key: string]: unknown;
}

export type OutcomeCheck =
  | { kind: 'valid'; outcome: Outcome; raw: unknown }
  | { kind: 'unparseable' }
  | { kind: 'too_large' }
  | { kind: 'too_deep' }
  | { kind: 'invalid'; problems: string[]; raw: unknown }
  | { kind: 'missing' };

function isHttpStatus(value: unknown): value is number | null {
  return value === null || Number.isInteger(value);
}

function checkResourceUsage(value: unknown, problems: string[]): void {
  if (!isObject(value)) {
    problems.push('resource_usage: must be an object');
    return;
  }
  const measured = own(value, 'both_arms_measured');
  if (measured !== undefined && typeof measured !== 'boolean') {
    problems.push('resource_usage.both_arms_measured: must be a boolean');
  }
  const peak = own(value, 'peak_job_gpu_mib');
  if (peak !== undefined && peak !== null && typeof peak !== 'number') {
    problems.push('resource_usage.peak_job_gpu_mib: must be a number');
  }
}

function checkIncident(value: unknown, path: string, problems: string[]): void {
  if (!isObject(value)) {
    problems.push(`${path}: must be an object`);
    return;
  }
  if (!Object.hasOwn(value, 'http_status') || !isHttpStatus(own(value, 'http_status'))) {
    problems.push(`${path}.http_status: must be an integer or null`);
  }
  if (typeof own(value, 'requires_stop') !== 'boolean') {
    problems.push(`${path}.requires_stop: must be a boolean`);
  }
}

function checkE1Attempt(value: unknown, problems: string[]): void {
  if (!isObject(value)) {
    problems.push('e1_attempt: must be an object');
    return;
  }
  const incidents = own(value, 'provider_incidents');
  if (incidents === undefined) return;
  if (!Array.isArray(incidents)) {
    problems.push('e1_attempt.provider_incidents: must be an array');
    return;
  }
  incidents.forEach((incident: unknown, i) => {
    checkIncident(incident, `e1_attempt.provider_incidents[${i}]`, problems);
  });
}

/** One broken rule of the contract: where (a JSON path, `outcome` for the whole file) and what. */
export interface OutcomeProblem {
  readonly path: string;
  readonly message: string;
}

/**
 * Why an outcome is not a valid one, rule by rule (result.json `outcome_problems`, the report, status, the log):
 * empty for a valid outcome. `exitCode`: the container's, named when the outcome is missing and it is not 0. The paths are the contract's own keys (never text from the driver).
 */
export function outcomeProblemsOf(check: OutcomeCheck, exitCode: number | null = null): OutcomeProblem[] {
  switch (check.kind) {
    case 'valid':
      return [];
    case 'missing':
      // The agent's own exit code says whose failure it was (issue 40): a crash reads as the agent's, not ours.
      return [
        {
          path: 'outcome',
          message:
            'no file at ROBOGUIDE_OUTCOME_PATH when the container exited' +
            (exitCode !== null && exitCode !== 0
              ? ` (the agent exited with code ${exitCode}: see the end of its stderr.log)`
              : ''),
        },
      ];
    case 'unparseable':
      return [{ path: 'outcome', message: 'not a readable UTF-8 JSON document' }];
    case 'too_large':
      return [{ path: 'outcome', message: `larger than ${MAX_OUTCOME_BYTES} bytes` }];
    case 'too_deep':
      return [{ path: 'outcome', message: `nested deeper than ${MAX_OUTCOME_DEPTH} levels` }];
    case 'invalid':
      return check.problems.map(splitProblem);
  }
}

function splitProblem(problem: string): OutcomeProblem {
  const at = problem.indexOf(': ');
  return at < 0
    ? { path: 'outcome', message: problem }
    : { path: problem.slice(0, at), message: problem.slice(at + 2) };
}

/** `path: message`, as status, the report and the log show a problem. */
export function formatOutcomeProblem(p: OutcomeProblem): string {
  return `${p.path}: ${p.message}`;
}

/** A required flag: missing (no default: the driver must say true or false) or of the wrong type. */
function flagProblem(value: unknown): string {
  return value === undefined ? 'is required (true or false; there is no default)' : 'must be a boolean';
}

/** Every way the parsed value breaks the contract; empty when it honours it. */
export function outcomeProblems(raw: unknown): string[] {
  if (!isObject(raw)) return ['outcome: must be a JSON object'];
  const problems: string[] = [];
  if (typeof own(raw, 'job_id') !== 'string')
    problems.push(
      own(raw, 'job_id') === undefined
        ? 'job_id: is required (a string: ROBOGUIDE_JOB_ID)'
        : 'job_id: must be a string',
    );
  if (typeof own(raw, 'infrastructure_failure') !== 'boolean') {
    problems.push(`infrastructure_failure: ${flagProblem(own(raw, 'infrastructure_failure'))}`);
  }
  if (typeof own(raw, 'fatal_failure') !== 'boolean')
    problems.push(`fatal_failure: ${flagProblem(own(raw, 'fatal_failure'))}`);
  if (!Object.hasOwn(raw, 'arms'))
    problems.push('arms: is required (any JSON value: kept verbatim, never read)');
  const usage = own(raw, 'resource_usage');
  if (usage !== undefined) checkResourceUsage(usage, problems);
  const attempt = own(raw, 'e1_attempt');
  if (attempt !== undefined) checkE1Attempt(attempt, problems);
  return problems;
}

const UTF8 = new TextDecoder('utf-8', { fatal: true });

const OPEN_BRACKET = 0x5b;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACKET = 0x5d;
const CLOSE_BRACE = 0x7d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * True when the JSON text nests arrays/objects deeper than `max` (brackets inside strings do not count).
 * One linear scan without recursion, run before JSON.parse, so a hostile document never reaches a
 * recursive step (JSON.stringify, canonical JSON) deep enough to overflow the stack.
 */
export function jsonDepthExceeds(bytes: Uint8Array, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < bytes.length; i++) {
    const c = bytes[i];
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) inString = true;
    else if (c === OPEN_BRACKET || c === OPEN_BRACE) {
      depth++;
      if (depth > max) return true;
    } else if (c === CLOSE_BRACKET || c === CLOSE_BRACE) depth--;
  }
  return false;
}

function parseJson(bytes: Uint8Array): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: JSON.parse(UTF8.decode(bytes)) as unknown };
  } catch {
    return { ok: false };
  }
}

/**
 * Checks what was read against the contract. An unreadable file (permissions, a directory) is
 * reported as `unparseable`: its content could not be obtained, so it cannot be trusted. A file over
 * the size or depth limit is `too_large`/`too_deep` and never parsed. Never throws.
 */
export function checkOutcome(read: OutcomeRead): OutcomeCheck {
  if (read.state === 'missing') return { kind: 'missing' };
  if (read.state === 'unreadable') return { kind: 'unparseable' };
  if (read.state === 'too_large' || read.bytes.byteLength > MAX_OUTCOME_BYTES) return { kind: 'too_large' };
  if (jsonDepthExceeds(read.bytes, MAX_OUTCOME_DEPTH)) return { kind: 'too_deep' };
  const parsed = parseJson(read.bytes);
  if (!parsed.ok) return { kind: 'unparseable' };
  const problems = outcomeProblems(parsed.value);
  if (problems.length > 0) return { kind: 'invalid', problems, raw: parsed.value };
  return { kind: 'valid', outcome: parsed.value as Outcome, raw: parsed.value };
}

/**
 * The GPU observation a completed pair contributes to the dispatch policy: the peak in MiB only
 * when both arms were measured and the peak is finite and positive; otherwise none.
 */
export function gpuObservation(outcome: Outcome): number | null {
  const usage = outcome.resource_usage;
  if (usage?.both_arms_measured !== true) return null;
  const peak = usage.peak_job_gpu_mib;
  return typeof peak === 'number' && Number.isFinite(peak) && peak > 0 ? peak : null;
}
