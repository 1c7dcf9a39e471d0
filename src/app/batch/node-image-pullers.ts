import type { ImagePlanRecord } from '../../core/image-plan.js';
import type { JournalAppend } from '../../core/journal-events.js';
import type { Job } from '../../core/manifest/schema.js';
import type { PairOutcome } from '../../core/supervisor-machine.js';
import type { Clock } from '../ports/clock.js';
import {
  afterWait,
  type BatchImages,
  type ImagePlanSnapshot,
  type ImageReadiness,
  type PulledImage,
} from './batch-images.js';
import type { ImagePuller } from './image-puller.js';

/**
 * Issue 43 on a swarm: every node pulls for its own pairs, on its own engine (`--node-engine`), within its own budget
 * (`image_plan.budget_bytes`, per node). The rule: an image is pulled ahead on every node a pending pair of it may run
 * on, the ready nodes its placement matches less those declared down (a pair pinned to one node: that node only; an
 * unpinned pair: every node). A pair whose turn came waits until some such node holds its image, then is admitted
 * only to the nodes that hold it (its service pinned there and created by digest, so the node never pulls for it).
 * It keeps the image on each of them until it ends. Its pull failed on every node: it fails as `image_pull_failed`;
 * a node whose registry is down (and none holding it): the batch pauses, as on one engine.
 */
export interface NodeImagePullersDeps {
  readonly plan: ImagePlanRecord;
  /** The nodes that pull (`image_plan.nodes`). */
  readonly nodes: readonly string[];
  /** One node's puller; `queue` is the images of the pending pairs that may run on that node, in dispatch order. */
  readonly make: (node: string, queue: () => readonly string[]) => ImagePuller;
  /** The pending pairs (not claimed yet) in dispatch order: their images and placements. */
  readonly pending: () => readonly Pick<Job, 'job_id' | 'placement' | 'image'>[];
  readonly imageOf: (job: Pick<Job, 'job_id' | 'image'>) => string;
  /** The nodes a pair with these placement constraints may run on now. Rejects when the manager cannot tell. */
  readonly eligible: (constraints: readonly string[]) => Promise<readonly string[]>;
  readonly journal: JournalAppend;
  readonly clock: Clock;
}

const keyOf = (placement: readonly string[] | undefined): string => JSON.stringify(placement ?? []);

export class NodeImagePullers implements BatchImages {
  readonly #deps: NodeImagePullersDeps;
  readonly #pullers = new Map<string, ImagePuller>();
  /** Per placement: the nodes it allowed when last asked (unknown: every node pulls ahead for it). */
  readonly #eligible = new Map<string, readonly string[]>();
  /** Pairs that waited for their image, and how long (counted here: each waited on several nodes at once). */
  #waits = 0;
  #waitedMs = 0;

  constructor(deps: NodeImagePullersDeps) {
    this.#deps = deps;
    for (const node of deps.nodes)
      this.#pullers.set(
        node,
        deps.make(node, () => this.#queueOf(node)),
      );
  }

  async start(): Promise<void> {
    const placements = new Map(this.#deps.pending().map((j) => [keyOf(j.placement), j.placement ?? []]));
    for (const constraints of placements.values()) await this.#refresh(constraints).catch(() => undefined);
    await Promise.all([...this.#pullers.values()].map((p) => p.start()));
  }

  async close(): Promise<void> {
    await Promise.all([...this.#pullers.values()].map((p) => p.close()));
  }

  async whenPulled(
    job: Job,
    image: string,
    run: (pulled: PulledImage) => Promise<PairOutcome>,
  ): Promise<PairOutcome> {
    if (this.#deps.plan.images[image] === undefined) return run({}); // every node held it at start
    const nodes = (await this.#refresh(job.placement ?? []).catch(() => [] as readonly string[])).filter(
      (n) => this.#pullers.has(n),
    );
    // No node may take it now: admission refuses it (no node) and it is tried again, like any pair.
    if (nodes.length === 0) return run({ nodes: [] });
    const began = this.#deps.clock.now().getTime();
    const first = new AbortController();
    const answers = await Promise.all(
      nodes.map(async (node) => {
        const ready = await this.#puller(node).ready(image, job.job_id, {
          signal: first.signal,
          quiet: true,
        });
        if (ready.kind === 'ready') first.abort();
        return [node, ready] as const;
      }),
    );
    const holding = answers.filter(([, r]) => r.kind === 'ready').map(([n]) => n);
    const waited = this.#deps.clock.now().getTime() - began;
    if (waited > 0) {
      this.#waits += 1;
      this.#waitedMs += waited;
      const ref = this.#deps.plan.images[image]?.ref ?? image;
      await this.#deps
        .journal('image', {
          action: 'waited',
          image,
          ref,
          job_id: job.job_id,
          waited_ms: waited,
          nodes: holding,
        })
        .catch(() => undefined);
    }
    try {
      return await afterWait(combined(answers.map(([, r]) => r)), image, run, holding);
    } finally {
      for (const node of holding) this.#puller(node).release(image);
    }
  }

  snapshot(): ImagePlanSnapshot {
    const nodes = Object.fromEntries(
      [...this.#pullers].map(([node, p]) => [node, { ...p.snapshot(), held: p.heldImages() }]),
    );
    const each = Object.entries(nodes);
    const sum = (f: (s: ImagePlanSnapshot) => number): number => each.reduce((t, [, s]) => t + f(s), 0);
    return {
      budget_bytes: this.#deps.plan.budget_bytes,
      held_bytes: sum((s) => s.held_bytes),
      images: Object.keys(this.#deps.plan.images).length,
      present: new Set(each.flatMap(([, s]) => s.held)).size,
      pulling: each.flatMap(([node, s]) => s.pulling.map((p) => ({ ...p, node }))),
      pulls: sum((s) => s.pulls),
      evictions: sum((s) => s.evictions),
      failed: each.flatMap(([node, s]) => s.failed.map((f) => ({ ...f, node }))),
      waits: this.#waits,
      waited_ms: this.#waitedMs,
      nodes,
    };
  }

  #puller(node: string): ImagePuller {
    const puller = this.#pullers.get(node);
    if (puller === undefined) throw new Error(`no image puller for node ${node}`);
    return puller;
  }

  async #refresh(constraints: readonly string[]): Promise<readonly string[]> {
    const nodes = await this.#deps.eligible(constraints);
    this.#eligible.set(keyOf(constraints), nodes);
    return nodes;
  }

  #queueOf(node: string): string[] {
    return this.#deps
      .pending()
      .filter((j) => this.#eligible.get(keyOf(j.placement))?.includes(node) ?? true)
      .map((j) => this.#deps.imageOf(j));
  }
}

/**
 * The nodes' answers as one (none holds it): the batch stops → stopped; a registry some node could not reach →
 * unavailable (the batch pauses; resume pulls again); every node refused → failed, with the first node's message.
 */
function combined(answers: readonly ImageReadiness[]): ImageReadiness {
  if (answers.some((a) => a.kind === 'ready')) return { kind: 'ready' };
  const stopped = answers.find((a) => a.kind === 'stopped');
  if (stopped !== undefined) return stopped;
  const outage = answers.find((a) => a.kind === 'unavailable');
  if (outage !== undefined) return outage;
  return answers[0] ?? { kind: 'stopped' };
}
