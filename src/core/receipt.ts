/** `jobs/<id>/receipt.json`: the claim. Published exclusively before the container exists (SPEC §4, §5 step 1). */
export const RECEIPT_SCHEMA = 'roboguide.e1.receipt/v1' as const;

import { PRIVATE_OUTCOME_DIR } from './evidence-names.js';
import type { MountMode } from './mount-mode.js';
import type { ProcessIdentity } from './process-identity.js';
import { networkModeFor, type NetworkChoice } from './pair-network.js';
import { effectiveEgress, egressInputOf, networkOfEgress, type EgressInput } from './egress/policy.js';
import { taggedRecord } from './json-object.js';

/** The receipt's `network` (the one the container joins) and `egress` (the effective policy, frozen). */
function networkAndEgress(
  network: 'none' | 'bridge',
  written: EgressInput | undefined,
): Pick<Receipt, 'network' | 'egress'> {
  const policy = effectiveEgress(network, written);
  const choice = networkOfEgress(policy);
  return { network: { choice, engine_network: networkModeFor(choice) }, egress: egressInputOf(policy) };
}

export interface Receipt {
  readonly schema: typeof RECEIPT_SCHEMA;
  readonly batch_id: string;
  readonly job_id: string;
  readonly attempt: 1;
  readonly claim_id: string;
  readonly claimed_at: string;
  readonly host_boot_id: string | null;
  readonly supervisor: ProcessIdentity;
  readonly reservation_id: string | null;
  readonly image: string;
  /**
   * The id (`sha256:…`) `image` had when the run was set up, which the container was created from (a batch's pin, a
   * pair run's inspect). Absent: run by tag (a swarm batch, receipts from before).
   */
  readonly image_id?: string;
  /** Where the driver writes its outcome (the path inside the container; the operator's copy on the host). */
  readonly outcome_path: string;
  /**
   * The pair's private copy of its outcome, relative to the pair's folder (`outcome/<name>`): the host folder
   * bind-mounted at the outcome's folder, which only this pair sees. The verdict and the terminal proof read
   * it. Absent in receipts written before it existed (the proof then reads `outcome_path`).
   */
  readonly private_outcome?: string;
  readonly source_sha256: Readonly<Record<string, string>>;
  readonly code_version: string;
  /**
   * The job's network (`bridge` or `none`) and the engine network the container joins for it (`roboguide-pairs` or
   * `none`; docs/spec.md §5.1). Absent in receipts written before it existed (those pairs ran on the engine's default
   * bridge network).
   */
  readonly network?: { readonly choice: NetworkChoice; readonly engine_network: string };
  /**
   * The egress policy the pair runs under, frozen (docs/spec.md §5.6): its own or the manifest's, else its network's
   * (`none` → mode none, `bridge` → open). Absent in receipts written before it existed (those were open or none by
   * their network).
   */
  readonly egress?: EgressInput;
  /**
   * The OCI runtime the container is created under (`runc`, `runsc` for gVisor, or another the engine registers;
   * docs/spec.md §5.1). Absent in receipts written before it existed (those pairs ran under the engine's default).
   */
  readonly runtime?: string;
  /**
   * How the pair's bind sources reach the engine (docs/spec.md 5.3): `staged` (each opened without following a link
   * and bound onto a staging point of ours) or `walked` (the host refused the bind: the link-free path, verified after
   * the create and the start). Absent in receipts written before it existed (those pairs were walked).
   */
  readonly mount_mode?: MountMode;
  /** Null until the container exists; then recorded by atomic replace. */
  readonly container_id: string | null;
  readonly container_name: string;
  /**
   * `pair run` only: the registry the pair was admitted in, as batch.json records a batch's (a SQLite file, or a
   * PostgreSQL URL without its password): `reconcile` and `pair recover` default to it. Absent in batch receipts
   * (batch.json has it) and in receipts written before it existed.
   */
  readonly registry_path?: string;
}

/** Docker names allow [a-zA-Z0-9][a-zA-Z0-9_.-]*; job ids are already in that alphabet. */
export function containerName(jobId: string, claimId: string): string {
  return `roboguide-${jobId}-${claimId.slice(0, 8)}`;
}

/** The folder, relative to a pair's folder, bind-mounted at its outcome's folder inside the container. */

/** `outcome/<name of outcome_path>`: where the pair's outcome lands on the host, relative to its folder. */
export function privateOutcomeRel(outcomePath: string): string {
  const name =
    outcomePath
      .split('/')
      .filter((s) => s !== '')
      .at(-1) ?? 'outcome.json';
  return `${PRIVATE_OUTCOME_DIR}/${name}`;
}

/**
 * The claim of a pair, as published before its container exists: the same for a batch pair and `pair run`. The
 * host's boot id is the supervisor's (one read, so the two can never disagree).
 */
export function buildReceipt(input: {
  readonly batchId: string;
  readonly jobId: string;
  readonly claimId: string;
  readonly claimedAt: Date;
  readonly supervisor: ProcessIdentity;
  readonly reservationId: string;
  readonly image: string;
  readonly imageId?: string;
  readonly outcomePath: string;
  readonly sourceSha256: Readonly<Record<string, string>>;
  readonly codeVersion: string;
  readonly network: 'none' | 'bridge';
  /** The job's egress policy as written (absent: its network's). */
  readonly egress?: EgressInput | undefined;
  /** The container's OCI runtime (`runtime`). */
  readonly runtime: string;
  /** `pair run`: the registry it was admitted in (`registry_path`). */
  readonly registryPath?: string;
  /** How its bind sources reach the engine (`mount_mode`). */
  readonly mountMode?: MountMode;
}): Receipt {
  return {
    schema: RECEIPT_SCHEMA,
    batch_id: input.batchId,
    job_id: input.jobId,
    attempt: 1,
    claim_id: input.claimId,
    claimed_at: input.claimedAt.toISOString(),
    host_boot_id: input.supervisor.boot_id,
    supervisor: input.supervisor,
    reservation_id: input.reservationId,
    image: input.image,
    ...(input.imageId !== undefined ? { image_id: input.imageId } : {}),
    outcome_path: input.outcomePath,
    private_outcome: privateOutcomeRel(input.outcomePath),
    source_sha256: input.sourceSha256,
    code_version: input.codeVersion,
    ...networkAndEgress(input.network, input.egress),
    runtime: input.runtime,
    ...(input.mountMode !== undefined ? { mount_mode: input.mountMode } : {}),
    container_id: null,
    container_name: containerName(input.jobId, input.claimId),
    ...(input.registryPath !== undefined ? { registry_path: input.registryPath } : {}),
  };
}

/** The check `receipt.json` is read back through: its kind and the names its readers use. */
export const isReceipt = taggedRecord<Receipt>(RECEIPT_SCHEMA, [
  'batch_id',
  'job_id',
  'claim_id',
  'container_name',
]);
