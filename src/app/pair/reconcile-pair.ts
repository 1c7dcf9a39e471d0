/**
 * Terminal reconciliation (SPEC §8): the only way a pair's reservation is given back.
 * Build the terminal proof from the retained evidence → write `terminal-proof.json` (storage-fault
 * rule) → one registry transaction writes the board row terminal and releases the reservation, each
 * read back. `preview` runs the same checks and reads the registry, and writes nothing at all.
 * Re-running is always safe: a replay changes nothing; a hold or refusal keeps the reservation.
 */
import { BATCH_FILE, JOBS_DIR, RECEIPT_FILE, RESULT_FILE } from '../../core/evidence-names.js';
import { join } from 'node:path';
import { sha256Hex } from '../digest.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import { ExitCode, RoboguideError } from '../../core/errors.js';
import type { Receipt } from '../../core/receipt.js';
import type { ResultRecord } from '../../core/result.js';
import {
  buildTerminalProof,
  canonicalJson,
  proofDigestInput,
  receiptProblems,
  resultProblems,
  type HoldReason,
  type TerminalProof,
} from '../../core/terminal-proof.js';
import type { CapacityRegistry, TerminalCommit } from '../ports/capacity-registry.js';
import type { TerminalCommitRefusal } from '../../core/terminal-commit-rule.js';
import type { ContainerRuntime } from '../ports/container-runtime.js';
import { writeJsonVerified } from '../durable-write.js';
import {
  commitWithReadBack,
  predictCommit,
  type CommitOutcome,
  type ReconcileStep,
} from './reconcile-commit.js';

export const PROOF_FILE = 'terminal-proof.json';

export type ReconcileMode = 'preview' | 'execute';
export type ReconcileKind = 'would_commit' | 'committed' | 'already_committed' | 'hold' | 'refused';
/**
 * `storage_fault`/`registry_fault`: a write or read failed; `registry_unavailable`: the registry timed out or could not
 * be reached (retry later). The reservation and the evidence are kept.
 */
export type ReconcileHoldReason = HoldReason | 'storage_fault' | 'registry_fault' | 'registry_unavailable';
export type ReconcileReason = ReconcileHoldReason | TerminalCommitRefusal;

export interface ReconcileReport {
  readonly job_id: string;
  readonly mode: ReconcileMode;
  readonly kind: ReconcileKind;
  readonly reason: ReconcileReason | null;
  readonly detail: string;
  readonly steps: readonly string[];
  readonly proof_sha256: string | null;
}

export interface ReconcileDeps {
  readonly store: EvidenceStore;
  readonly registry: CapacityRegistry;
  readonly runtime: Pick<ContainerRuntime, 'inspect' | 'listByLabel'>;
  /** SHA-256 (hex) of the outcome file now; null when it does not exist. */
  readOutcomeSha256(path: string): Promise<string | null>;
  readonly afterStep?: (step: ReconcileStep) => void;
}

export interface ReconcilePairInput {
  /** Directory of the pair inside D: `jobs/<job_id>`, or `.` for a `pair run` directory. */
  readonly jobRel: string;
  readonly mode: ReconcileMode;
}

/** Headline of each hold or refusal, for operators. */
export const REASON_TEXT: Readonly<Record<ReconcileReason, string>> = {
  evidence_missing: 'evidence missing',
  evidence_contradictory: 'evidence contradictory',
  outcome_changed: 'outcome changed since result.json was written',
  container_present: 'container still present',
  cleanup_unverified: 'container absence cannot be verified',
  storage_fault: 'storage fault',
  registry_fault: 'registry fault',
  registry_unavailable: 'registry unavailable (timed out or unreachable)',
  run_owned_by_other_batch: 'cross-batch collision: the run id is owned by another batch',
  reservation_not_held_by_claim: 'stale admission: the reservation is not held by this claim',
  proof_mismatch: 'proof mismatch: the run was made terminal by a different proof',
  unknown_reservation: 'unknown reservation: the registry has no such reservation (another --registry?)',
};

/**
 * Internal: a reconciliation that ends early with a hold or refusal. Returned (never thrown) by each step; a class
 * so that `instanceof Halt` cannot be faked by evidence JSON, which is never an instance.
 */
class Halt {
  constructor(
    readonly reason: ReconcileReason,
    readonly detail: string,
  ) {}
}

interface Context {
  readonly deps: ReconcileDeps;
  readonly input: ReconcilePairInput;
  jobId: string;
  readonly steps: string[];
  proofSha256: string | null;
}

function report(
  ctx: Context,
  kind: ReconcileKind,
  reason: ReconcileReason | null,
  detail: string,
): ReconcileReport {
  return {
    job_id: ctx.jobId,
    mode: ctx.input.mode,
    kind,
    reason,
    detail,
    steps: [...ctx.steps],
    proof_sha256: ctx.proofSha256,
  };
}

function haltReport(ctx: Context, halt: Halt): ReconcileReport {
  const kind = halt.reason in REFUSALS ? 'refused' : 'hold';
  return report(ctx, kind, halt.reason, `${REASON_TEXT[halt.reason]}: ${halt.detail}; reservation kept`);
}

const REFUSALS: Readonly<Record<TerminalCommitRefusal, true>> = {
  run_owned_by_other_batch: true,
  reservation_not_held_by_claim: true,
  proof_mismatch: true,
  unknown_reservation: true,
};

function step(ctx: Context, text: string, point?: ReconcileStep): void {
  ctx.steps.push(text);
  if (point !== undefined) ctx.deps.afterStep?.(point);
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** JSON that may be absent (null); not JSON → evidence_contradictory, I/O error → storage_fault. */
async function readOptional(store: EvidenceStore, rel: string): Promise<unknown> {
  try {
    return await store.readJson(rel);
  } catch (err) {
    const parse = err instanceof RoboguideError && err.context['syscall'] === 'parse';
    return new Halt(
      parse ? 'evidence_contradictory' : 'storage_fault',
      `cannot read ${rel}: ${message(err)}`,
    );
  }
}

/** Required JSON evidence: missing → evidence_missing, wrong shape → evidence_contradictory. */
async function readEvidence(
  store: EvidenceStore,
  rel: string,
  problemsOf: (v: unknown) => string[],
): Promise<unknown> {
  const value = await readOptional(store, rel);
  if (value instanceof Halt) return value;
  if (value === null) return new Halt('evidence_missing', `no ${rel}`);
  const problems = problemsOf(value);
  if (problems.length > 0)
    return new Halt('evidence_contradictory', `${rel} is malformed (${problems.join(', ')})`);
  return value;
}

async function loadEvidence(ctx: Context): Promise<{ receipt: Receipt; result: ResultRecord } | Halt> {
  const { store } = ctx.deps;
  const jobRel = ctx.input.jobRel;
  const receipt = await readEvidence(store, join(jobRel, RECEIPT_FILE), receiptProblems);
  if (receipt instanceof Halt) return receipt;
  const { job_id: jobId, batch_id: receiptBatchId } = receipt as Receipt;
  ctx.jobId = jobId;
  if (jobRel !== '.') {
    const dirName = jobRel.split('/').at(-1);
    if (dirName !== jobId)
      return new Halt('evidence_contradictory', `receipt in ${jobRel} names job ${jobId}`);
    const batch = await readOptional(store, BATCH_FILE);
    if (batch instanceof Halt) return batch;
    const batchId = (batch as { batch_id?: unknown } | null)?.batch_id;
    if (batch !== null && batchId !== receiptBatchId) {
      return new Halt(
        'evidence_contradictory',
        `receipt batch ${receiptBatchId} differs from batch.json batch ${String(batchId)}`,
      );
    }
  }
  const result = await readEvidence(store, join(jobRel, RESULT_FILE), resultProblems);
  if (result instanceof Halt) return result;
  return { receipt: receipt as Receipt, result: result as ResultRecord };
}

async function outcomeDigest(ctx: Context, path: string): Promise<string | null | Halt> {
  try {
    return await ctx.deps.readOutcomeSha256(path);
  } catch (err) {
    return new Halt('evidence_missing', `cannot read the outcome file ${path}: ${message(err)}`);
  }
}

/** The reconciler's own look: by every container id on record, then by the claim label. */
async function containerPresent(
  ctx: Context,
  receipt: Receipt,
  result: ResultRecord,
): Promise<boolean | Halt> {
  const { runtime } = ctx.deps;
  const ids = new Set([receipt.container_id, result.container.id].filter((id): id is string => id !== null));
  try {
    for (const id of ids) if ((await runtime.inspect(id)) !== null) return true;
    return (await runtime.listByLabel({ 'roboguide.claim': receipt.claim_id })).length > 0;
  } catch (err) {
    return new Halt(
      'cleanup_unverified',
      `cannot ask the engine whether the container is gone: ${message(err)}`,
    );
  }
}

async function buildProof(ctx: Context): Promise<TerminalProof | Halt> {
  const evidence = await loadEvidence(ctx);
  if (evidence instanceof Halt) return evidence;
  const { receipt, result } = evidence;
  // The pair's private copy (no container can reach it once removed); receipts from before it existed name only outcome_path.
  const outcomeFile =
    receipt.private_outcome === undefined
      ? receipt.outcome_path
      : ctx.deps.store.resolve(join(ctx.input.jobRel, receipt.private_outcome));
  const current = await outcomeDigest(ctx, outcomeFile);
  if (current instanceof Halt) return current;
  const present = await containerPresent(ctx, receipt, result);
  if (present instanceof Halt) return present;
  step(
    ctx,
    `evidence read (receipt, result, outcome ${current === null ? 'missing' : 'present'}, container ${present ? 'present' : 'absent'})`,
    'evidence_read',
  );
  const decision = buildTerminalProof({
    receipt,
    result,
    currentOutcomeSha256: current,
    outcomeState: current === null ? 'missing' : 'present',
    containerPresent: present,
  });
  if (decision.kind === 'hold') return new Halt(decision.reason, decision.detail);
  ctx.proofSha256 = sha256Hex(proofDigestInput(decision.proof));
  step(ctx, `proof built (sha256 ${ctx.proofSha256})`, 'proof_built');
  return decision.proof;
}

/** True when the proof file already holds this proof; a different one is a contradiction. */
async function proofOnDisk(ctx: Context, proofRel: string): Promise<boolean | Halt> {
  const existing = await readOptional(ctx.deps.store, proofRel);
  if (existing instanceof Halt) return existing;
  if (existing === null) return false;
  let text: string;
  try {
    text = canonicalJson(existing);
  } catch {
    return new Halt('evidence_contradictory', `${proofRel} is nested too deeply to be a terminal proof`);
  }
  const digest = sha256Hex(text);
  if (digest !== ctx.proofSha256) {
    return new Halt(
      'evidence_contradictory',
      `${proofRel} holds proof ${digest}, the evidence now gives ${ctx.proofSha256 ?? '?'}`,
    );
  }
  return true;
}

function commitOf(proof: TerminalProof, proofSha256: string): TerminalCommit {
  return {
    batchId: proof.batch_id,
    jobId: proof.job_id,
    claimId: proof.run_id,
    reservationId: proof.reservation_id,
    classification: proof.classification,
    outcomeSha256: proof.outcome_sha256,
    proofSha256,
  };
}

function finish(ctx: Context, outcome: CommitOutcome, reservationId: string): ReconcileReport {
  if (outcome.kind === 'refused') return haltReport(ctx, new Halt(outcome.reason, outcome.detail));
  if (outcome.kind === 'fault') {
    const reason = outcome.unavailable === true ? 'registry_unavailable' : 'registry_fault';
    return haltReport(ctx, new Halt(reason, outcome.detail));
  }
  for (const [text, point] of outcome.steps) step(ctx, text, point);
  const detail =
    outcome.kind === 'would_commit'
      ? `would write the board row terminal and release reservation ${reservationId}`
      : outcome.kind === 'committed'
        ? `board row terminal; reservation ${reservationId} released`
        : 'already committed by this proof: nothing changed';
  return report(ctx, outcome.kind, null, detail);
}

async function run(ctx: Context): Promise<ReconcileReport> {
  const proof = await buildProof(ctx);
  if (proof instanceof Halt) return haltReport(ctx, proof);
  const proofSha256 = ctx.proofSha256 ?? sha256Hex(proofDigestInput(proof));
  const proofRel = join(ctx.input.jobRel, PROOF_FILE);
  const written = await proofOnDisk(ctx, proofRel);
  if (written instanceof Halt) return haltReport(ctx, written);
  const commit = commitOf(proof, proofSha256);
  if (ctx.input.mode === 'preview') {
    step(ctx, written ? 'proof already written (same digest)' : `would write ${PROOF_FILE}`);
    return finish(ctx, await predictCommit(ctx.deps.registry, commit), commit.reservationId);
  }
  if (written) {
    step(ctx, 'proof already written (same digest)', 'proof_written');
  } else {
    const write = await writeJsonVerified(ctx.deps.store, proofRel, proof);
    if (write.kind === 'failed')
      return haltReport(ctx, new Halt('storage_fault', `cannot write ${proofRel}: ${write.error.message}`));
    const how =
      write.kind === 'verified_after_error'
        ? ' (verified after an error)'
        : write.attempts > 1
          ? ' (after a retry)'
          : '';
    step(ctx, `proof written${how}`, 'proof_written');
  }
  return finish(ctx, await commitWithReadBack(ctx.deps.registry, commit), commit.reservationId);
}

/** Reconciles one pair; never throws for evidence, storage or registry trouble: those are reports. */
export async function reconcilePair(
  deps: ReconcileDeps,
  input: ReconcilePairInput,
): Promise<ReconcileReport> {
  const ctx: Context = {
    deps,
    input,
    jobId: input.jobRel === '.' ? '.' : (input.jobRel.split('/').at(-1) ?? input.jobRel),
    steps: [],
    proofSha256: null,
  };
  return run(ctx);
}

export interface ReconcileBatchResult {
  readonly reports: readonly ReconcileReport[];
  /** Claimed jobs without result.json (still running, or lost): left for the supervisor or `resume`. */
  readonly skipped: readonly { readonly job_id: string; readonly why: string }[];
}

function usage(message: string): RoboguideError {
  return new RoboguideError('E_USAGE', message, { exitCode: ExitCode.invalidInput });
}

/** Every claimed job of D that has a result (or just `jobId`); a `pair run` directory is one pair at its root. */
export async function reconcileBatch(
  deps: ReconcileDeps,
  input: { readonly mode: ReconcileMode; readonly jobId?: string },
): Promise<ReconcileBatchResult> {
  const { store } = deps;
  if (await store.exists(RECEIPT_FILE)) {
    const receipt = await store.readJson(RECEIPT_FILE);
    if (input.jobId !== undefined && receipt?.job_id !== input.jobId) {
      throw usage(`${store.root} is the directory of pair ${String(receipt?.job_id)}, not ${input.jobId}`);
    }
    return { reports: [await reconcilePair(deps, { jobRel: '.', mode: input.mode })], skipped: [] };
  }
  const names = await store.list('jobs');
  if (input.jobId !== undefined) {
    if (!names.includes(input.jobId) || !(await store.exists(`${JOBS_DIR}/${input.jobId}/${RECEIPT_FILE}`))) {
      throw usage(`no claimed job ${input.jobId} in ${store.root}`);
    }
    return {
      reports: [await reconcilePair(deps, { jobRel: `jobs/${input.jobId}`, mode: input.mode })],
      skipped: [],
    };
  }
  const reports: ReconcileReport[] = [];
  const skipped: { job_id: string; why: string }[] = [];
  for (const name of names) {
    if (!(await store.exists(`${JOBS_DIR}/${name}/${RECEIPT_FILE}`))) continue;
    if (!(await store.exists(`${JOBS_DIR}/${name}/${RESULT_FILE}`))) {
      skipped.push({
        job_id: name,
        why: 'claimed, no result.json yet (running, or lost: resume the batch first)',
      });
      continue;
    }
    reports.push(await reconcilePair(deps, { jobRel: `jobs/${name}`, mode: input.mode }));
  }
  return { reports, skipped };
}
