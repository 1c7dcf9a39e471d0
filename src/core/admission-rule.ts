import { largestPeakMib } from './dispatch-policy.js';
import { isWithin, normalizeAbsolute } from './mount-policy.js';

/**
 * Admission (SPEC §7), the rule itself: a pure function of the facts a registry holds for one node (its limits, what
 * its held reservations add up to, who holds the ports the pair publishes, and the reservation already made for
 * the claim) → a decision. Both registries read these facts inside the transaction that will store the decision,
 * so that concurrent admitters never exceed a limit; they decide nothing themselves. The I/O around the rule (the
 * nodes tried in turn, the registry calls, the start-time checks) is `src/app/admission.ts`.
 */

/** A node's limits: reservations at once, and the GPU MiB its held reservations may add up to (null: no limit). */
export interface NodeBudget {
  readonly maxReservations: number;
  readonly gpuMib: number | null;
}

export type AdmitRefusalReason = 'host_full' | 'gpu_budget' | 'port_held' | 'mount_nested';

/**
 * `held`/`limit`: reservations for `host_full`, MiB for `gpu_budget` (on the request's node); the refused request is
 * not counted in `held`. `port_held`: `port` is held on the node by `holderBatchId` (`held`/`limit` are 1).
 */
export interface AdmitRefusal {
  readonly kind: 'refused';
  readonly reason: AdmitRefusalReason;
  readonly held: number;
  readonly limit: number;
  readonly node: string;
  readonly port?: number;
  readonly holderBatchId?: string;
  /** `mount_nested`: the requested writable source, and the held one (of `holderBatchId`) it lies inside or holds. */
  readonly source?: string;
  readonly heldSource?: string;
}

/** What a registry holds for one admission, read in the transaction that stores the decision. */
export interface AdmissionFacts {
  /** The reservation already made for the request's claim, if any. */
  readonly existing: { readonly id: string; readonly batchId: string; readonly jobId: string } | null;
  readonly node: string;
  readonly budget: NodeBudget;
  /** The node's held reservations: how many, and the GPU MiB they add up to. */
  readonly held: { readonly count: number; readonly gpuMib: number };
  /** Held reservations' ports on the node among those requested (any order). */
  readonly portHolders: readonly { readonly port: number; readonly batchId: string }[];
  /** Every held reservation's writable mount sources on the node (absent: none recorded). */
  readonly heldMounts?: readonly { readonly source: string; readonly batchId: string }[];
}

export interface AdmissionAsk {
  readonly batchId: string;
  readonly jobId: string;
  readonly gpuMib: number;
  /** The container's writable bind sources (absolute, link-free): none may nest with another held one. */
  readonly writableMounts?: readonly string[];
  /** The pair's own evidence folder (absolute): held exclusively, see `evidenceSource`. */
  readonly evidenceFolder?: string;
  /** Read-only bind sources: not recorded, but none may be, lie inside or hold a running pair's evidence. */
  readonly readOnlyMounts?: readonly string[];
}

/** What a reservation holds of the host's folders: its writable sources and its evidence (marked exclusive). */
export function requestedSources(ask: Pick<AdmissionAsk, 'writableMounts' | 'evidenceFolder'>): string[] {
  return [
    ...new Set([
      ...reservedMounts(ask.writableMounts),
      ...(ask.evidenceFolder !== undefined ? [evidenceSource(ask.evidenceFolder)] : []),
    ]),
  ].sort();
}

export type AdmissionDecision =
  /** Store a held reservation (its ports, its board row) on `facts.node`. */
  | { readonly kind: 'admit' }
  /** The same claim was admitted before (same batch and job): nothing to store. */
  | { readonly kind: 'already_admitted'; readonly reservationId: string }
  /** The claim is admitted for another run: a fault of the caller, nothing to store. */
  | { readonly kind: 'claim_taken'; readonly batchId: string; readonly jobId: string }
  | AdmitRefusal;

/**
 * The rule, in order: a claim admitted before is the same admission (or, for another run, a fault); then the node's
 * reservation slots; then its GPU budget; then the lowest requested port another reservation holds on the node.
 */
export function decideAdmission(ask: AdmissionAsk, facts: AdmissionFacts): AdmissionDecision {
  const { existing, node, budget, held } = facts;
  if (existing !== null) {
    return existing.batchId === ask.batchId && existing.jobId === ask.jobId
      ? { kind: 'already_admitted', reservationId: existing.id }
      : { kind: 'claim_taken', batchId: existing.batchId, jobId: existing.jobId };
  }
  if (held.count >= budget.maxReservations)
    return { kind: 'refused', reason: 'host_full', held: held.count, limit: budget.maxReservations, node };
  if (budget.gpuMib !== null && held.gpuMib + ask.gpuMib > budget.gpuMib)
    return { kind: 'refused', reason: 'gpu_budget', held: held.gpuMib, limit: budget.gpuMib, node };
  const holder = facts.portHolders.reduce<AdmissionFacts['portHolders'][number] | undefined>(
    (lowest, h) => (lowest === undefined || h.port < lowest.port ? h : lowest),
    undefined,
  );
  if (holder !== undefined) {
    return {
      kind: 'refused',
      reason: 'port_held',
      held: 1,
      limit: 1,
      node,
      port: holder.port,
      holderBatchId: holder.batchId,
    };
  }
  const heldMounts = facts.heldMounts ?? [];
  const evidenceHeld = heldMounts.filter((h) => mountSourceOf(h.source).exclusive);
  const nested =
    nestedMount(requestedSources(ask), heldMounts) ??
    nestedMount(reservedMounts(ask.readOnlyMounts), evidenceHeld);
  if (nested !== null) {
    return {
      kind: 'refused',
      reason: 'mount_nested',
      held: 1,
      limit: 1,
      node,
      source: nested.source,
      heldSource: nested.heldSource,
      holderBatchId: nested.held.batchId,
    };
  }
  return { kind: 'admit' };
}

/**
 * A running pair's own evidence folder as a held source (docs/spec.md 5.3): exclusive, so no other container may
 * mount it, anything inside it (its private outcome folder) or anything holding it, not even as an equal source.
 * Kept in the same record as the writable sources (the registry's column holds absolute paths), marked by a trailing
 * `/`, which a normalized writable source never has.
 */
export function evidenceSource(folder: string): string {
  return `${normalizeAbsolute(folder)}/`;
}

/** A recorded source: its path, and whether it is a pair's evidence folder (held exclusively). */
export function mountSourceOf(raw: string): { readonly path: string; readonly exclusive: boolean } {
  const exclusive = raw.length > 1 && raw.endsWith('/');
  return { path: normalizeAbsolute(raw), exclusive };
}

/**
 * The first requested writable source that lies inside, or holds, a held one (docs/spec.md 5.3): one container
 * could then swap a folder the other's mount is resolved through. Equal sources are allowed (two pairs may share a
 * folder, as in one manifest), except a running pair's evidence (`evidenceSource`): equal is refused too. `source`
 * and `heldSource` are the paths, an evidence folder named as such.
 */
export function nestedMount<H extends { readonly source: string }>(
  requested: readonly string[],
  held: readonly H[],
): { readonly source: string; readonly heldSource: string; readonly held: H } | null {
  for (const raw of requested) {
    const asked = mountSourceOf(raw);
    for (const h of held) {
      const other = mountSourceOf(h.source);
      const equal = asked.path === other.path;
      const nested = isWithin(asked.path, other.path) || isWithin(other.path, asked.path);
      if (!nested || (equal && !asked.exclusive && !other.exclusive)) continue;
      const heldSource = other.exclusive ? `${other.path} (a running pair's evidence)` : other.path;
      return { source: asked.path, heldSource, held: h };
    }
  }
  return null;
}

/** The writable sources a reservation records: each once, normalized, ascending. */
export function reservedMounts(sources: readonly string[] | undefined): string[] {
  return [...new Set((sources ?? []).map(normalizeAbsolute))].sort();
}

/** The published ports a reservation holds: each once, ascending. */
export function reservedPorts(ports: readonly number[] | undefined): number[] {
  return [...new Set(ports ?? [])].sort((a, b) => a - b);
}

/**
 * The GPU memory admission reserves for a pair: none for a job that neither asks for GPUs nor declares `gpu_mib`;
 * else the largest peak measured for the job's image (`largestPeakMib`, rounded up), or before the first peak the
 * declared `gpu_mib` (0 when not declared).
 */
export function expectedGpuMib(
  job: { readonly gpus?: unknown; readonly gpu_mib?: number | undefined },
  imagePeaksMib: readonly number[],
): number {
  if (job.gpus === undefined && job.gpu_mib === undefined) return 0;
  const peak = largestPeakMib(imagePeaksMib);
  return peak !== null ? Math.ceil(peak) : (job.gpu_mib ?? 0);
}

/**
 * The GPU MiB to reserve on a node with this budget: the expected figure, at most the node's whole budget. A
 * measured peak above every budget would otherwise make the pair wait for ever; reserving the whole budget makes it
 * run alone on the node instead (a declared `gpu_mib` that can never fit is refused before anything runs).
 */
export function cappedGpuMib(expected: number, budget: NodeBudget): number {
  if (budget.gpuMib === null || budget.gpuMib <= 0 || expected <= budget.gpuMib) return expected;
  return budget.gpuMib;
}

/** Whether a declared `gpu_mib` fits the whole budget of at least one of these nodes (null: no GPU budget). */
export function fitsSomeBudget(mib: number, budgets: readonly (number | null)[]): boolean {
  return budgets.some((b) => b === null || mib <= b);
}

/**
 * The order to try the ready nodes in: those not declared down, starting `turn` places along (so that successive
 * pairs start on another node).
 */
export function nodesInTurn(
  ready: readonly string[],
  down: ReadonlySet<string>,
  turn: number,
): readonly string[] {
  const up = ready.filter((n) => !down.has(n));
  if (up.length === 0) return [];
  const first = turn % up.length;
  return [...up.slice(first), ...up.slice(0, first)];
}

/** The placement a pair admitted on `node` runs with: its own constraints plus `node.hostname==NODE`. */
export function pinnedPlacement(
  placement: readonly string[] | undefined,
  node: string | null,
): string[] | undefined {
  if (node === null) return placement === undefined ? undefined : [...placement];
  return [...(placement ?? []), `node.hostname==${node}`];
}
