/**
 * Admission (SPEC §7, issue 13): one rule for a batch's pairs, `pair run` and serve's pairs.
 *
 * - Local executor: the pair is reserved on the registry's own node.
 * - Swarm executor: on the first of the nodes the manager calls ready (and that satisfy the job's placement, and
 *   were not declared down) with room — its slots, its GPU budget, the pair's published ports — tried from one
 *   further along each time so that pairs spread; the pair's service is then pinned to that node
 *   (`node.hostname==NODE`), so that it runs where its reservation is.
 * - GPU memory: the pair's expected MiB is reserved, but never more than the node's whole GPU budget
 *   (`cappedGpuMib`; a declared `gpu_mib` that can never fit is refused before anything runs: `neverFitIssues`).
 *
 * The rule itself (a node's slots, GPU budget and ports → admit or refuse; the expected MiB; the node order) is pure,
 * in `src/core/admission-rule.ts`; the registries read its facts and store its decision in one transaction. This
 * module is the I/O around it: the nodes tried in turn, the registry calls, the start-time checks.
 */
import { InvalidInputError, type Issue } from '../core/errors.js';
import { cappedGpuMib, fitsSomeBudget, nodesInTurn, pinnedPlacement } from '../core/admission-rule.js';
import type {
  AdmitRequest,
  AdmitResult,
  CapacityRegistry,
  PortHolder,
  SupervisorLease,
} from './ports/capacity-registry.js';
import type { NodeInventory } from './ports/executor-inventory.js';

/** The nodes a pair with these placement constraints may be admitted to, in the order to try. */
export type AdmissionNodes = (constraints: readonly string[]) => Promise<readonly string[]>;

/**
 * Swarm (a runtime that lists its ready nodes): the ready nodes matching the constraints, less `down()`, rotated by
 * one on every call so that successive pairs start on another node. A runtime without nodes (local): undefined.
 * A failure to list the nodes propagates (the caller decides: a batch waits, `pair run` fails).
 */
export function admissionNodesFor(
  inventory: NodeInventory | undefined,
  down: () => Promise<readonly string[]> = () => Promise.resolve([]),
): AdmissionNodes | undefined {
  if (inventory === undefined) return undefined;
  const readyNodes = (constraints: readonly string[]) => inventory.readyNodes(constraints);
  let turn = 0;
  return async (constraints) => {
    const gone = new Set(await down().catch(() => []));
    const inTurn = nodesInTurn(await readyNodes(constraints), gone, turn);
    if (inTurn.length > 0) turn += 1;
    return inTurn;
  };
}

/**
 * Admission on the registry's own node (`nodes` null), or on the first of `nodes` with room. Every node refusing:
 * the last refusal (no node at all: `host_full`). The reservation's GPU MiB is capped at the node's whole budget.
 */
export async function admitOnNodes(
  registry: CapacityRegistry,
  request: AdmitRequest,
  nodes: readonly string[] | null,
): Promise<{ readonly admitted: AdmitResult; readonly node: string | null }> {
  const capped = async (node: string | undefined): Promise<AdmitRequest> =>
    request.gpuMib > 0
      ? {
          ...request,
          gpuMib: cappedGpuMib(request.gpuMib, await registry.limits(node ?? registry.localNode)),
        }
      : request;
  if (nodes === null) return { admitted: await registry.admit(await capped(undefined)), node: null };
  let last: AdmitResult = { kind: 'refused', reason: 'host_full', node: '', held: 0, limit: 0 };
  for (const node of nodes) {
    last = await registry.admit({ ...(await capped(node)), node });
    if (last.kind !== 'refused') return { admitted: last, node };
  }
  return { admitted: last, node: null };
}

/** What a pair needs of a node's budget, for the start-time check. */
export interface GpuNeed {
  readonly path: string;
  readonly jobId: string;
  readonly mib: number;
  readonly placement?: readonly string[];
}

/**
 * A declared `gpu_mib` larger than the whole GPU budget of every node the pair may run on can never be admitted:
 * one issue per such pair, naming the job, its figure and the budgets (the registry's own node when `nodes` is
 * undefined). A node without a GPU budget fits any figure. No node at all: nothing to say here (the pair waits for
 * a node like any other).
 */
export async function neverFitIssues(
  registry: CapacityRegistry,
  needs: readonly GpuNeed[],
  nodes: AdmissionNodes | undefined,
): Promise<Issue[]> {
  const issues: Issue[] = [];
  const candidatesOf = candidateNodes(registry, nodes);
  const budgetOf = new Map<string, number | null>();
  for (const need of needs) {
    const candidates = await candidatesOf(need.placement);
    if (candidates.length === 0) continue;
    const budgets: { node: string; mib: number | null }[] = [];
    for (const node of candidates) {
      if (!budgetOf.has(node)) budgetOf.set(node, (await registry.limits(node)).gpuMib);
      budgets.push({ node, mib: budgetOf.get(node) ?? null });
    }
    if (
      fitsSomeBudget(
        need.mib,
        budgets.map((b) => b.mib),
      )
    )
      continue;
    const where =
      budgets.length === 1
        ? `the whole GPU budget of node ${budgets[0]!.node} (${budgets[0]!.mib} MiB)`
        : `the whole GPU budget of every node it may run on (${budgets.map((b) => `${b.node}: ${b.mib} MiB`).join(', ')})`;
    issues.push({
      path: need.path,
      rule: `${need.mib} MiB exceeds ${where}: job ${need.jobId} could never be admitted`,
    });
  }
  return issues;
}

/** The nodes a pair with this placement may run on (the registry's own without `nodes`), listed once per placement. */
function candidateNodes(
  registry: CapacityRegistry,
  nodes: AdmissionNodes | undefined,
): (placement: readonly string[] | undefined) => Promise<readonly string[]> {
  const listed = new Map<string, Promise<readonly string[]>>();
  return (placement) => {
    if (nodes === undefined) return Promise.resolve([registry.localNode]);
    const key = JSON.stringify(placement ?? []);
    let found = listed.get(key);
    if (found === undefined) {
      found = nodes(placement ?? []);
      listed.set(key, found);
    }
    return found;
  };
}

/** A published port a pair needs, for the start-time check. */
export interface PortNeed {
  readonly path: string;
  readonly jobId: string;
  readonly port: number;
  readonly placement?: readonly string[];
}

/** Is a recorded supervisor lease's holder alive? The notion `resume` uses (same pid, start time and boot). */
export type LeaseAlive = (holder: SupervisorLease) => boolean;

/**
 * Published ports held by other batches, at start. A port is a reason to refuse (exit 2) only when it is held on
 * every node the pair may run on by a batch whose supervisor is alive (its registry lease held by a live process):
 * that batch is running and will give the port back. A holder whose supervisor is gone (SIGKILLed, or exited with
 * the pair's slot kept) would otherwise block the new batch for ever: the batch starts, with a warning naming the
 * holder and how to finish it (`e1-batch resume` or `reconcile --execute` of its output directory); the pair waits
 * for the port (`port_held`) until then, so two containers never bind it at once. A `pair run` keeps no lease: its
 * port is waited for in the same way.
 */
export async function heldPortIssues(
  registry: CapacityRegistry,
  needs: readonly PortNeed[],
  nodes: AdmissionNodes | undefined,
  isAlive: LeaseAlive,
): Promise<{ readonly issues: Issue[]; readonly warnings: string[] }> {
  const issues: Issue[] = [];
  const warnings: string[] = [];
  const alive = new Map<string, SupervisorLease | null>();
  const liveHolder = async (batchId: string): Promise<SupervisorLease | null> => {
    if (!alive.has(batchId)) {
      const lease = await registry.supervisorLease(batchId);
      alive.set(batchId, lease !== null && isAlive(lease) ? lease : null);
    }
    return alive.get(batchId) ?? null;
  };
  // One look-up per node for every port a pair may need there (not one per pair and node).
  const candidatesOf = candidateNodes(registry, nodes);
  const candidates = await Promise.all(needs.map((need) => candidatesOf(need.placement)));
  const portsByNode = new Map<string, Set<number>>();
  needs.forEach((need, i) => {
    for (const node of candidates[i] ?? [])
      portsByNode.set(node, (portsByNode.get(node) ?? new Set()).add(need.port));
  });
  const holders = new Map<string, PortHolder>();
  for (const [node, ports] of portsByNode) {
    for (const holder of await registry.portHolders(node, [...ports]))
      if (!holders.has(`${node}:${holder.port}`)) holders.set(`${node}:${holder.port}`, holder);
  }
  for (const [i, need] of needs.entries()) {
    const nodesOfNeed = candidates[i] ?? [];
    const live: { holder: PortHolder; lease: SupervisorLease }[] = [];
    const dead: PortHolder[] = [];
    let free = nodesOfNeed.length === 0; // no node now: the pair waits for one like any other
    for (const node of nodesOfNeed) {
      const holder = holders.get(`${node}:${need.port}`);
      if (holder === undefined) {
        free = true;
        break;
      }
      const lease = await liveHolder(holder.batchId);
      if (lease !== null) live.push({ holder, lease });
      else dead.push(holder);
    }
    if (free) continue;
    if (dead.length === 0) {
      const held = live.map(
        ({ holder, lease }) =>
          `on node ${holder.node} by batch ${holder.batchId} (job ${holder.jobId}), whose supervisor (pid ${lease.pid}) is alive`,
      );
      issues.push({
        path: need.path,
        rule: `port ${need.port} is held ${held.join('; ')}, which is still running: wait for it to finish, or choose another port`,
      });
      continue;
    }
    for (const holder of dead) {
      warnings.push(
        `${need.path}: port ${need.port} is held on node ${holder.node} by batch ${holder.batchId} (job ${holder.jobId}), whose supervisor is not running: ` +
          `job ${need.jobId} waits for the port until that batch is finished — \`e1-batch resume --output DIR\` (or \`reconcile --output DIR --execute\`) with its output directory`,
      );
    }
  }
  return { issues, warnings };
}

/**
 * `pair run` and serve's pairs: the batch's rule for one pair (no measured peak: its declared `gpu_mib`, 0 when
 * none). A declared figure no node it may run on could ever hold is refused first (exit 2, `E_SPEC_INVALID`, naming
 * the field and the figures), before anything is reserved. Returns the request and the nodes to try, in turn.
 */
export async function onePairAdmission(
  registry: CapacityRegistry,
  inventory: NodeInventory | undefined,
  request: Omit<AdmitRequest, 'gpuMib' | 'node' | 'jobId'>,
  job: {
    readonly job_id: string;
    readonly gpu_mib?: number | undefined;
    readonly placement?: readonly string[] | undefined;
  },
  source: string,
): Promise<{ readonly request: AdmitRequest; readonly nodes: readonly string[] | null }> {
  const nodes = admissionNodesFor(inventory);
  const gpuMib = job.gpu_mib ?? 0;
  const placement = job.placement ?? [];
  const issues =
    gpuMib > 0
      ? await neverFitIssues(
          registry,
          [{ path: 'gpu_mib', jobId: job.job_id, mib: gpuMib, placement }],
          nodes,
        )
      : [];
  if (issues.length > 0)
    throw new InvalidInputError('E_SPEC_INVALID', `pair spec ${source} cannot run here`, issues);
  const candidates = nodes === undefined ? null : await nodes(placement);
  return { request: { ...request, jobId: job.job_id, gpuMib }, nodes: candidates };
}

/** onePairAdmission, then the admission; the job as it must run: on a swarm, pinned to the node it was admitted on. */
export async function admitOnePair<
  J extends {
    readonly job_id: string;
    readonly gpu_mib?: number | undefined;
    readonly placement?: readonly string[] | undefined;
  },
>(
  registry: CapacityRegistry,
  inventory: NodeInventory | undefined,
  request: Omit<AdmitRequest, 'gpuMib' | 'node' | 'jobId'>,
  job: J,
  source: string,
): Promise<{ readonly admitted: AdmitResult; readonly node: string | null; readonly job: J }> {
  const planned = await onePairAdmission(registry, inventory, request, job, source);
  const { admitted, node } = await admitOnNodes(registry, planned.request, planned.nodes);
  const pinned = node === null ? job : { ...job, placement: pinnedPlacement(job.placement, node) };
  return { admitted, node, job: pinned };
}
