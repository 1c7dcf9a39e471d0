/**
 * The terminal proof of a pair (SPEC §8 step 1): built from the retained evidence only (receipt,
 * result.json, the outcome file's digest now, the reconciler's own look for the container). It is
 * deterministic: the same evidence always gives the same proof and the same digest, so a replay
 * can tell "already committed" from "something changed". Missing or contradictory evidence is a
 * hold, never a guess.
 */
import { ToolError } from './errors.js';
import type { Receipt } from './receipt.js';
import { CLASSIFICATIONS, type Classification, type Reason, type ResultRecord } from './result.js';
import { isObject, type JsonObject } from './json-object.js';

export const TERMINAL_PROOF_SCHEMA = 'roboguide.terminal_proof/v1' as const;

export interface TerminalProof {
  readonly schema: typeof TERMINAL_PROOF_SCHEMA;
  readonly batch_id: string;
  readonly job_id: string;
  /** = the claim id. */
  readonly run_id: string;
  readonly reservation_id: string;
  readonly launch: {
    readonly claimed_at: string;
    readonly host_boot_id: string | null;
    readonly container_id: string | null;
    readonly image: string;
    readonly code_version: string;
  };
  readonly source_sha256: Readonly<Record<string, string>>;
  readonly classification: Classification;
  readonly reasons: readonly Reason[];
  readonly outcome_sha256: string | null;
  readonly exit_code: number | null;
  readonly logs: {
    readonly stdout_closed: boolean;
    readonly stderr_closed: boolean;
    readonly stdout_bytes: number;
    readonly stderr_bytes: number;
  };
  /**
   * Always verified when a proof exists. `pair_cleanup`: the pair's own removal verified absence;
   * `reconciler`: it did not, and the reconciler saw the container gone (inspect and label query).
   */
  readonly cleanup: { readonly verified_absent: true; readonly verified_by: 'pair_cleanup' | 'reconciler' };
}

export type HoldReason =
  | 'evidence_missing'
  | 'evidence_contradictory'
  | 'outcome_changed'
  | 'container_present'
  | 'cleanup_unverified';

export type ProofDecision =
  | { readonly kind: 'proof'; readonly proof: TerminalProof }
  | { readonly kind: 'hold'; readonly reason: HoldReason; readonly detail: string };

export interface TerminalProofInput {
  readonly receipt: Receipt;
  readonly result: ResultRecord;
  /** SHA-256 of the outcome file as it is now; null when it is missing. */
  readonly currentOutcomeSha256: string | null;
  readonly outcomeState: 'present' | 'missing';
  /** The reconciler's own look: the container (by id, or any by claim label) still exists. */
  readonly containerPresent: boolean;
}

function hold(reason: HoldReason, detail: string): ProofDecision {
  return { kind: 'hold', reason, detail };
}

/** Receipt and result must name the same run, container and (when recorded) nothing else. */
function identityContradiction(receipt: Receipt, result: ResultRecord): string | null {
  const pairs: readonly [string, string, string][] = [
    ['batch_id', receipt.batch_id, result.batch_id],
    ['job_id', receipt.job_id, result.job_id],
    ['claim_id', receipt.claim_id, result.claim_id],
  ];
  for (const [field, inReceipt, inResult] of pairs) {
    if (inReceipt !== inResult)
      return `receipt ${field} ${inReceipt} differs from result ${field} ${inResult}`;
  }
  const a = receipt.container_id;
  const b = result.container.id;
  if (a !== null && b !== null && a !== b) return `receipt container ${a} differs from result container ${b}`;
  return null;
}

function outcomeProblem(input: TerminalProofInput): ProofDecision | null {
  const { result } = input;
  const recorded = result.outcome_sha256;
  const now = input.outcomeState === 'present' ? input.currentOutcomeSha256 : null;
  if (recorded !== null && input.outcomeState === 'missing') {
    return hold(
      'evidence_contradictory',
      `result records outcome sha256 ${recorded} but the outcome file is gone`,
    );
  }
  if (recorded !== now) {
    return hold(
      'outcome_changed',
      `outcome sha256 was ${recorded ?? 'missing'} in result.json, is ${now ?? 'missing'} now`,
    );
  }
  if (
    result.classification === 'completed' &&
    (recorded === null || result.outcome === null || result.outcome === undefined)
  ) {
    return hold('evidence_contradictory', 'result is completed but records no outcome');
  }
  return null;
}

export function buildTerminalProof(input: TerminalProofInput): ProofDecision {
  const { receipt, result } = input;
  const contradiction = identityContradiction(receipt, result);
  if (contradiction !== null) return hold('evidence_contradictory', contradiction);
  const reservationId = receipt.reservation_id;
  if (reservationId === null) {
    return hold('evidence_contradictory', 'receipt has no reservation id: a claim without a reservation');
  }
  const outcome = outcomeProblem(input);
  if (outcome !== null) return outcome;
  const containerId = receipt.container_id ?? result.container.id;
  if (input.containerPresent) {
    return hold(
      'container_present',
      `container ${containerId ?? '(by claim label)'} of run ${receipt.claim_id} still exists`,
    );
  }
  return {
    kind: 'proof',
    proof: {
      schema: TERMINAL_PROOF_SCHEMA,
      batch_id: receipt.batch_id,
      job_id: receipt.job_id,
      run_id: receipt.claim_id,
      reservation_id: reservationId,
      launch: {
        claimed_at: receipt.claimed_at,
        host_boot_id: receipt.host_boot_id,
        container_id: containerId,
        image: receipt.image,
        code_version: receipt.code_version,
      },
      source_sha256: { ...receipt.source_sha256 },
      classification: result.classification,
      reasons: [...result.reasons],
      outcome_sha256: result.outcome_sha256,
      exit_code: result.container.exit_code,
      logs: {
        stdout_closed: result.logs.stdout.closed,
        stderr_closed: result.logs.stderr.closed,
        stdout_bytes: result.logs.stdout.bytes,
        stderr_bytes: result.logs.stderr.bytes,
      },
      cleanup: {
        verified_absent: true,
        verified_by: result.cleanup.verified_absent ? 'pair_cleanup' : 'reconciler',
      },
    },
  };
}

/** Deeper values are refused by canonicalJson with a typed error instead of overflowing the stack. */
export const MAX_CANONICAL_DEPTH = 512;

/** A value nested deeper than MAX_CANONICAL_DEPTH: thrown by canonicalJson (never a stack overflow). */
export class TooDeepError extends ToolError {
  constructor() {
    super('E_TOO_DEEP', `value nested deeper than ${MAX_CANONICAL_DEPTH} levels`);
    this.name = 'TooDeepError';
  }
}

/**
 * JSON with object keys sorted at every depth and no whitespace: equal values give equal text. Throws
 * TooDeepError (only) for a value nested deeper than MAX_CANONICAL_DEPTH.
 */
export function canonicalJson(value: unknown): string {
  return canonicalAt(value, 0);
}

function canonicalAt(value: unknown, depth: number): string {
  if (depth > MAX_CANONICAL_DEPTH) throw new TooDeepError();
  if (Array.isArray(value)) return `[${value.map((item) => canonicalAt(item ?? null, depth + 1)).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const record = value as Readonly<Record<string, unknown>>;
    const fields = Object.keys(record)
      .filter((key) => record[key] !== undefined)
      .sort()
      .map((key) => `${JSON.stringify(key)}:${canonicalAt(record[key], depth + 1)}`);
    return `{${fields.join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/** The text whose SHA-256 is the proof digest (stored on the board and the reservation). */
export function proofDigestInput(proof: TerminalProof): string {
  return canonicalJson(proof);
}

// ---- Shape checks of evidence read from disk (JSON of unknown shape) ----

const isString = (v: unknown): boolean => typeof v === 'string';
const isStringOrNull = (v: unknown): boolean => v === null || typeof v === 'string';
const isCount = (v: unknown): boolean => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

function problems(
  value: JsonObject,
  checks: Readonly<Record<string, (v: unknown) => boolean>>,
  prefix: string,
): string[] {
  return Object.entries(checks)
    .filter(([key, check]) => !check(value[key]))
    .map(([key]) => `${prefix}${key}`);
}

function isStringMap(v: unknown): boolean {
  return isObject(v) && Object.values(v).every(isString);
}

/** Fields of receipt.json that the proof uses, with wrong or missing ones named. */
export function receiptProblems(value: unknown): string[] {
  if (!isObject(value)) return ['receipt is not a JSON object'];
  return problems(
    value,
    {
      batch_id: isString,
      job_id: isString,
      claim_id: isString,
      claimed_at: isString,
      host_boot_id: isStringOrNull,
      reservation_id: isStringOrNull,
      image: isString,
      outcome_path: isString,
      source_sha256: isStringMap,
      code_version: isString,
      container_id: isStringOrNull,
      private_outcome: (v) =>
        v === undefined || (typeof v === 'string' && /^outcome\/(?!\.{1,2}$)[^/]+$/.test(v)),
    },
    'receipt.',
  );
}

function isLog(v: unknown): boolean {
  return isObject(v) && isCount(v['bytes']) && typeof v['closed'] === 'boolean';
}

/** Fields of result.json that the proof uses, with wrong or missing ones named. */
export function resultProblems(value: unknown): string[] {
  if (!isObject(value)) return ['result is not a JSON object'];
  const top = problems(
    value,
    {
      batch_id: isString,
      job_id: isString,
      claim_id: isString,
      classification: (v) => CLASSIFICATIONS.some((c) => c === v),
      reasons: (v) => Array.isArray(v) && v.every(isString),
      outcome_sha256: isStringOrNull,
      container: isObject,
      logs: (v) => isObject(v) && isLog(v['stdout']) && isLog(v['stderr']),
      cleanup: (v) => isObject(v) && typeof v['verified_absent'] === 'boolean',
    },
    'result.',
  );
  const container = value['container'];
  if (!isObject(container)) return top;
  const exitCode = container['exit_code'];
  return [
    ...top,
    ...problems(
      container,
      { id: isStringOrNull, exit_code: () => exitCode === null || Number.isInteger(exitCode) },
      'result.container.',
    ),
  ];
}
