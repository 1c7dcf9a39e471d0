/**
 * `capacity release --evidence-lost`: the way back for a reservation whose evidence folder is gone (deleted by hand,
 * a disk replaced), which terminal reconciliation cannot prove and so keeps held for ever (docs/spec.md 11, "A slot
 * whose evidence is gone"). The proof here is the engine's and the registry's, never the operator's word alone:
 * the batch's supervisor is not alive, the claim's container was created and is gone (inspect 404 and no container
 * with its claim label), and the evidence folder the reservation holds no longer exists (it exists: `reconcile`).
 * The proof is written durably before the one registry transaction that marks the run terminal
 * (`infrastructure_failure`: its outcome cannot be known) and releases the reservation.
 */
import { canonicalJson } from '../core/terminal-proof.js';
import { mountSourceOf } from '../core/admission-rule.js';
import { sha256Hex } from './digest.js';
import { writeJsonVerified } from './durable-write.js';
import type { EvidenceStore } from './evidence/evidence-store.js';
import type { CapacityRegistry, Reservation, SupervisorLease } from './ports/capacity-registry.js';
import type { Clock } from './ports/clock.js';
import type { ContainerRuntime } from './ports/container-runtime.js';
import type { HostIdentity } from './ports/host-identity.js';

export const LOST_EVIDENCE_PROOF_SCHEMA = 'roboguide.lost_evidence_release/v1' as const;

export interface ReleaseLostDeps {
  readonly registry: CapacityRegistry;
  readonly runtime: Pick<ContainerRuntime, 'inspect' | 'listByLabel'>;
  readonly host: Pick<HostIdentity, 'isAlive'>;
  readonly clock: Clock;
  /** Whether anything is at `path` now (a link counts: it is not followed). */
  readonly exists: (path: string) => Promise<boolean>;
  /** Where the proofs are kept (one file per run: `<claim id>.json`). */
  readonly proofs: EvidenceStore;
  readonly proofsDir: string;
  /** Creates the proofs folder (private to the user) when it is missing; called only when executing. */
  readonly ensureProofsDir: () => Promise<void>;
}

export interface ReleaseLostRequest {
  readonly batchId: string;
  readonly jobId: string;
  readonly mode: 'preview' | 'execute';
}

export type ReleaseLostRefusal =
  | 'no_such_reservation'
  | 'other_node'
  | 'supervisor_alive'
  | 'no_container_recorded'
  | 'container_present'
  | 'evidence_present'
  | 'registry_refused'
  | 'proof_not_written';

export interface LostEvidenceProof {
  readonly schema: typeof LOST_EVIDENCE_PROOF_SCHEMA;
  readonly batch_id: string;
  readonly job_id: string;
  readonly run_id: string;
  readonly reservation_id: string;
  readonly node: string;
  readonly container_id: string;
  /** The evidence folder the reservation held, found absent (none for a reservation that recorded none). */
  readonly absent_sources: readonly string[];
  readonly classification: 'infrastructure_failure';
  readonly reason: 'evidence_lost';
  readonly released_at: string;
}

export type ReleaseLostResult =
  | {
      readonly kind: 'would_release' | 'released' | 'already_released';
      readonly detail: string;
      readonly steps: readonly string[];
      /** Null for a run reconciliation made terminal (its proof is in the pair's evidence, terminal-proof.json). */
      readonly proof_path: string | null;
      readonly proof_sha256: string;
    }
  | {
      readonly kind: 'refused';
      readonly reason: ReleaseLostRefusal;
      readonly detail: string;
      readonly next: string;
    };

/** The registry's commit steps in the words `reconcile` prints them (read-backs are part of each step). */
const STEP_TEXT: Readonly<Record<string, readonly string[]>> = {
  board_written_terminal: ['board row terminal (read back)'],
  board_already_terminal: ['board row already terminal'],
  reservation_released: ['reservation released (read back)'],
  reservation_already_released: ['reservation already released'],
};

function refused(reason: ReleaseLostRefusal, detail: string, next: string): ReleaseLostResult {
  return { kind: 'refused', reason, detail, next };
}

async function findReservation(
  deps: ReleaseLostDeps,
  request: ReleaseLostRequest,
): Promise<Reservation | null> {
  const held = await deps.registry.held({ batchId: request.batchId });
  return held.find((r) => r.jobId === request.jobId) ?? null;
}

/** Why the slot must stay held; null when every check of the header holds. */
async function refusal(
  deps: ReleaseLostDeps,
  r: Reservation,
  sources: readonly string[],
  lease: SupervisorLease | null,
): Promise<ReleaseLostResult | null> {
  if (r.node !== deps.registry.localNode)
    return refused(
      'other_node',
      `reservation ${r.id} is on node ${r.node}, not this host (${deps.registry.localNode})`,
      `run this on ${r.node}: only its engine can show the container gone`,
    );
  if (lease !== null && deps.host.isAlive(lease))
    return refused(
      'supervisor_alive',
      `batch ${r.batchId}'s supervisor (pid ${lease.pid}) is alive and owns this reservation`,
      'stop the batch (e1-batch stop --output DIR) or wait for it; it releases its own slots',
    );
  if (r.containerId === null)
    return refused(
      'no_container_recorded',
      `reservation ${r.id} never recorded a container: its pair may still be starting`,
      'wait for the pair to start or end; a pair that never created its container releases its slot itself',
    );
  const present = [
    ...((await deps.runtime.inspect(r.containerId)) !== null ? [r.containerId] : []),
    ...(await deps.runtime.listByLabel({ 'roboguide.claim': r.claimId })).map((c) => c.id),
  ];
  if (present.length > 0)
    return refused(
      'container_present',
      `container ${present[0]!.slice(0, 12)} of run ${r.claimId} still exists: the pair may still be running`,
      `remove it (docker rm -f ${present[0]!.slice(0, 12)}), then run this again`,
    );
  for (const source of sources)
    if (await deps.exists(source))
      return refused(
        'evidence_present',
        `the evidence folder ${source} still exists: the evidence is not lost`,
        `reconcile it: reconcile --output <its batch or pair run directory> --execute`,
      );
  return null;
}

/** Checks, then (execute) writes the proof and commits it; a replay of a released run says so and changes nothing. */
export async function releaseLostSlot(
  deps: ReleaseLostDeps,
  request: ReleaseLostRequest,
): Promise<ReleaseLostResult> {
  const r = await findReservation(deps, request);
  if (r === null) return noneHeld(deps, request);
  // Only the evidence folder must be gone: the writable mounts (a user's working folder) may well outlive it.
  const sources = (await deps.registry.reservationSources(r.id))
    .map(mountSourceOf)
    .filter((s) => s.exclusive)
    .map((s) => s.path);
  const lease = await deps.registry.supervisorLease(r.batchId);
  const stop = await refusal(deps, r, sources, lease);
  if (stop !== null) return stop;
  const proof = lostEvidenceProof(r, sources, deps.clock.now());
  const proofSha256 = sha256Hex(canonicalJson(proof));
  const rel = `${r.claimId}.json`;
  const proofPath = `${deps.proofsDir}/${rel}`;
  const checks = checkSteps(r, sources, lease);
  if (request.mode === 'preview')
    return {
      kind: 'would_release',
      detail: `would mark run ${r.claimId} terminal (infrastructure_failure, evidence_lost) and release reservation ${r.id}`,
      steps: checks,
      proof_path: proofPath,
      proof_sha256: proofSha256,
    };
  await deps.ensureProofsDir();
  const written = await writeJsonVerified(deps.proofs, rel, proof);
  if (written.kind === 'failed')
    return refused(
      'proof_not_written',
      `${proofPath}: ${written.error.message}`,
      'fix the cause named above (space, permissions), then run again: nothing was released',
    );
  return commitRelease(deps, r, { proofPath, proofSha256, checks });
}

/** No reservation held for the job: released before (a replay, by this command or by reconciliation), or none. */
async function noneHeld(deps: ReleaseLostDeps, request: ReleaseLostRequest): Promise<ReleaseLostResult> {
  const done = (await deps.registry.board({ batchId: request.batchId })).find(
    (row) => row.jobId === request.jobId && row.state === 'terminal' && row.proofSha256 !== null,
  );
  if (done === undefined)
    return refused(
      'no_such_reservation',
      `no held reservation for batch ${request.batchId}, job ${request.jobId}`,
      'list the held ones with: capacity --batch <id>',
    );
  // Ours when this command released it; else reconciliation did, and its proof is in the pair's evidence.
  const ours = `${deps.proofsDir}/${done.claimId}.json`;
  return {
    kind: 'already_released',
    detail: `run ${done.claimId} is already terminal (${done.classification ?? '?'}); nothing is held`,
    steps: [],
    proof_path: (await deps.exists(ours)) ? ours : null,
    proof_sha256: done.proofSha256!,
  };
}

function lostEvidenceProof(r: Reservation, sources: readonly string[], now: Date): LostEvidenceProof {
  return {
    schema: LOST_EVIDENCE_PROOF_SCHEMA,
    batch_id: r.batchId,
    job_id: r.jobId,
    run_id: r.claimId,
    reservation_id: r.id,
    node: r.node,
    container_id: r.containerId!,
    absent_sources: sources,
    classification: 'infrastructure_failure',
    reason: 'evidence_lost',
    released_at: now.toISOString(),
  };
}

/** What the refusal checks found, in the words the command prints. */
function checkSteps(r: Reservation, sources: readonly string[], lease: SupervisorLease | null): string[] {
  return [
    lease === null
      ? `no supervisor lease recorded for ${r.batchId}`
      : `supervisor of ${r.batchId} (pid ${lease.pid}) not alive`,
    `container ${r.containerId!.slice(0, 12)} gone (inspect 404, no container labelled with run ${r.claimId})`,
    ...(sources.length > 0
      ? sources.map((s) => `evidence folder ${s} absent`)
      : ['no evidence folder recorded with the reservation (admitted before they were)']),
  ];
}

/** The one registry transaction: the run terminal (infrastructure_failure) and its reservation released. */
async function commitRelease(
  deps: ReleaseLostDeps,
  r: Reservation,
  written: { readonly proofPath: string; readonly proofSha256: string; readonly checks: readonly string[] },
): Promise<ReleaseLostResult> {
  const { proofPath, proofSha256 } = written;
  const commit = await deps.registry.commitTerminal({
    batchId: r.batchId,
    jobId: r.jobId,
    claimId: r.claimId,
    reservationId: r.id,
    classification: 'infrastructure_failure',
    outcomeSha256: null,
    proofSha256,
  });
  if (commit.kind === 'refused')
    return refused('registry_refused', `${commit.reason}: ${commit.detail}`, 'the reservation stays held');
  return {
    kind: commit.kind === 'committed' ? 'released' : 'already_released',
    detail: `run ${r.claimId} terminal (infrastructure_failure, evidence_lost); reservation ${r.id} released`,
    steps: [
      ...written.checks,
      `proof written (${proofPath})`,
      ...commit.steps.flatMap((step) => STEP_TEXT[step] ?? (step.endsWith('_read_back') ? [] : [step])),
    ],
    proof_path: proofPath,
    proof_sha256: proofSha256,
  };
}
