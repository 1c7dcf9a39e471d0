import { NODES_DOWN_FILE } from '../../core/evidence-names.js';
import { taggedRecord } from '../../core/json-object.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import { InvalidInputError } from '../../core/errors.js';
import type { CapacityRegistry } from '../ports/capacity-registry.js';
import type { Clock } from '../ports/clock.js';
import type { ContainerRuntime } from '../ports/container-runtime.js';
import type { Logger } from '../ports/logger.js';
import type { OutcomeReader } from '../ports/outcome-reader.js';
import { loadBatch, readJobFiles } from './batch-context.js';
import { reconcileFinished, removeUnverifiedContainer } from './finish-pair.js';

/** `D/nodes-down.json`: swarm nodes the operator declared down (issue 13), in declaration order. */

export interface NodesDownRecord {
  readonly schema: 'roboguide.e1.nodes_down/v1';
  readonly nodes: readonly { readonly node: string; readonly declared_at: string }[];
}

/** The check `nodes-down.json` is read back through. */
export const isNodesDownRecord = (value: unknown): value is NodesDownRecord =>
  taggedRecord<NodesDownRecord>('roboguide.e1.nodes_down/v1')(value) && Array.isArray(value.nodes);

/** The nodes declared down for this batch (none when the file is absent). */
export async function nodesDown(store: EvidenceStore): Promise<string[]> {
  const record = await store.readJson(NODES_DOWN_FILE, isNodesDownRecord);
  return record?.nodes.map((n) => n.node) ?? [];
}

export interface NodeDownReport {
  readonly node: string;
  /** Pairs lost with that node whose slot was still held, and how many of them were released now. */
  readonly held: readonly string[];
  readonly released: readonly string[];
}

export interface NodeDownDeps {
  readonly store: EvidenceStore;
  readonly registry: CapacityRegistry;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly outcomes: OutcomeReader;
  /** A runtime for this batch's executor that treats `downNodes` as gone. */
  readonly runtimeFor: (downNodes: readonly string[]) => ContainerRuntime;
}

/**
 * `e1-batch node-down`: record that a swarm node is gone for good, then release the slots of the pairs lost with it
 * (result `node_lost`, reservation still held because their container could not be verified gone). The release goes
 * through the usual terminal reconciliation, with a runtime that counts the declared node's containers as gone and
 * still insists on every other node's 404. Idempotent: a second declaration changes nothing.
 */
export async function declareNodeDown(deps: NodeDownDeps, given: string): Promise<NodeDownReport> {
  const { store } = deps;
  const { batch, manifest } = await loadBatch(store);
  if (batch.executor?.kind !== 'swarm') {
    throw new InvalidInputError('E_USAGE', 'node-down is for swarm batches', [
      { path: '--output', rule: 'the batch runs on the local executor: it has no nodes' },
    ]);
  }
  const known = new Set([
    ...Object.keys(batch.executor.node_engines),
    ...(batch.executor_nodes ?? []).map((n) => n.node),
  ]);
  // A node given by its swarm id is recorded by its hostname, the name admission and the image pullers use.
  const node = (batch.executor_nodes ?? []).find((n) => n.id === given && !known.has(given))?.node ?? given;
  if (!known.has(node)) {
    throw new InvalidInputError('E_USAGE', 'unknown node', [
      { path: '--node', rule: `must be one of the batch's nodes: ${[...known].sort().join(', ')}` },
    ]);
  }
  const existing = (await store.readJson(NODES_DOWN_FILE, isNodesDownRecord))?.nodes ?? [];
  if (!existing.some((n) => n.node === node)) {
    const record: NodesDownRecord = {
      schema: 'roboguide.e1.nodes_down/v1',
      nodes: [...existing, { node, declared_at: deps.clock.now().toISOString() }],
    };
    await store.writeJsonAtomic(NODES_DOWN_FILE, record);
  }
  const runtime = deps.runtimeFor([...existing.map((n) => n.node), node]);
  // No journal records: a live supervisor may be appending to it; the registry and nodes-down.json are the record.
  const finishDeps = {
    store,
    registry: deps.registry,
    execute: { runtime, logger: deps.logger, outcomes: deps.outcomes, clock: deps.clock },
    journal: () => Promise.resolve(),
  };
  const held: string[] = [];
  const released: string[] = [];
  for (const f of await readJobFiles(store, manifest)) {
    if (f.receipt === null || f.result === null || !f.result.reasons.includes('node_lost')) continue;
    if ((await deps.registry.reservationForClaim(f.receipt.claim_id))?.state !== 'held') continue;
    held.push(f.job.job_id);
    await removeUnverifiedContainer(finishDeps, f.receipt, f.result, manifest.stop_budget_seconds);
    const report = await reconcileFinished(finishDeps, f.receipt, f.result);
    if (report.released) released.push(f.job.job_id);
  }
  return { node, held, released };
}
