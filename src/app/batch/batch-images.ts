import type { PullFailureKind } from '../../core/image-plan.js';
import type { Job } from '../../core/manifest/schema.js';
import type { PairOutcome } from '../../core/supervisor-machine.js';

/**
 * A batch's image plan as the supervisor uses it (issue 43): started with the loop, closed after it, shown in
 * status.json, and the gate a pair passes before it is claimed. One engine (the local executor: `localImages`) or
 * one puller per swarm node (`NodeImagePullers`, src/app/batch/node-image-pullers.ts).
 */
export interface BatchImages {
  start(): Promise<void>;
  close(): Promise<void>;
  snapshot(): ImagePlanSnapshot;
  /**
   * The pair's turn came: wait for its image, then `run` it (its pull failed for good: `pullFailure`; swarm: only on
   * `nodes`, those that hold it). An outage or a stop while it waits gives the pair back unclaimed.
   */
  whenPulled(
    job: Job,
    image: string,
    run: (pulled: PulledImage) => Promise<PairOutcome>,
  ): Promise<PairOutcome>;
}

/** What a pair is run with once its image's wait ended. */
export interface PulledImage {
  /** Its pull failed for good (the registry's message, masked): the pair is claimed and fails `image_pull_failed`. */
  readonly pullFailure?: string;
  /** Swarm: the nodes that hold the image for it; admission tries only these. */
  readonly nodes?: readonly string[];
}

export type ImageReadiness =
  | { readonly kind: 'ready' }
  | { readonly kind: 'failed' | 'unavailable'; readonly message: string }
  | { readonly kind: 'stopped' };

/** What status.json and the report show of the plan (on a swarm: the nodes' sums, and each node's under `nodes`). */
export interface ImagePlanSnapshot {
  readonly budget_bytes: number;
  readonly held_bytes: number;
  readonly images: number;
  readonly present: number;
  readonly pulling: readonly {
    readonly image: string;
    readonly current_bytes: number;
    readonly total_bytes: number;
    readonly node?: string;
  }[];
  readonly pulls: number;
  readonly evictions: number;
  readonly failed: readonly {
    readonly image: string;
    readonly kind: PullFailureKind;
    readonly message: string;
    readonly node?: string;
  }[];
  readonly waits: number;
  readonly waited_ms: number;
  /** Swarm: per node, its own figures and the images it holds now (as the manifest names them). */
  readonly nodes?: Readonly<Record<string, ImagePlanSnapshot & { readonly held: readonly string[] }>>;
}

/**
 * What a pair's wait ended with, as the supervisor's outcome: an outage pauses the batch (nothing claimed), a stop
 * gives the pair back, a failed pull runs it to its `image_pull_failed` result.
 */
export async function afterWait(
  ready: ImageReadiness,
  image: string,
  run: (pulled: PulledImage) => Promise<PairOutcome>,
  nodes?: readonly string[],
): Promise<PairOutcome> {
  switch (ready.kind) {
    case 'stopped':
      return { kind: 'refused', reason: `waiting for image ${image}: the batch stops` };
    case 'unavailable':
      return { kind: 'failed', cause: { code: 'E_IMAGE_REGISTRY_UNAVAILABLE', message: ready.message } };
    case 'failed':
      return run({ pullFailure: ready.message });
    case 'ready':
      return run(nodes !== undefined ? { nodes } : {});
  }
  return ready satisfies never;
}
