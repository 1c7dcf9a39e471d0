import { jobImage } from '../../core/manifest/parse.js';
import type { SupervisorState } from '../../core/supervisor-machine.js';
import { afterWait, type BatchImages } from './batch-images.js';
import { ImagePuller } from './image-puller.js';
import type { ImagePullerDeps } from './image-puller-types.js';
import { NodeImagePullers } from './node-image-pullers.js';
import { nodesDown } from './node-down.js';
import {
  NO_CREDENTIALS,
  noDockerConfig,
  registryCredentials,
  type RegistryCredentials,
} from './registry-auth.js';
import type { SupervisorDeps } from './supervisor-deps.js';
import type { BatchRecord } from './layout.js';
import type { Manifest } from '../../core/manifest/schema.js';
import type { JournalAppend } from '../../core/journal-events.js';

/**
 * Issue 43: the supervisor's image puller, when the batch has an image plan and the engine has image calls. The
 * queue is the manifest's order of the pairs the machine has not dispatched yet; credentials are resolved from this
 * supervisor's environment (each resume resolves them again; nothing of them is written).
 */
export async function credentialsFor(
  deps: SupervisorDeps,
  batch: BatchRecord,
  manifest: Manifest,
): Promise<RegistryCredentials> {
  if (batch.image_plan === undefined || manifest.registries === undefined) return NO_CREDENTIALS;
  return registryCredentials(manifest, deps.environment, deps.readDockerConfig ?? noDockerConfig, {
    allowShortSecrets: batch.allow_short_secrets === true,
  });
}

/**
 * The batch's images: one puller on the engine (local executor), or one per swarm node on that node's engine
 * (`image_plan.nodes`, src/app/batch/node-image-pullers.ts). Undefined: no plan, or no image calls wired.
 */
export function imagePullerFor(input: {
  readonly deps: SupervisorDeps;
  readonly batch: BatchRecord;
  readonly manifest: Manifest;
  readonly journal: JournalAppend;
  readonly credentials: RegistryCredentials;
  readonly redact: (text: string) => string;
  readonly state: () => SupervisorState | undefined;
  readonly onChange: () => void;
}): BatchImages | undefined {
  const { deps, batch, manifest } = input;
  const plan = batch.image_plan;
  if (plan === undefined) return undefined;
  const pending = (): typeof manifest.jobs => {
    const claimed = input.state()?.claimed;
    return manifest.jobs.filter((j) => claimed === undefined || !claimed.has(j.job_id));
  };
  const common: Omit<ImagePullerDeps, 'pulls' | 'queue'> = {
    plan,
    credentials: input.credentials,
    journal: input.journal,
    logger: deps.logger,
    clock: deps.execute.clock,
    redact: input.redact,
    onChange: input.onChange,
    halted: () => {
      const state = input.state();
      return state !== undefined && (state.stop !== 'none' || state.pauseReasons.length > 0);
    },
    ...(batch.images !== undefined ? { ownImages: batch.images } : {}),
  };
  const nodes = deps.execute.nodes;
  if (plan.nodes !== undefined) {
    const pullsOn = deps.nodeImagePulls;
    if (pullsOn === undefined || nodes === undefined) return undefined;
    return new NodeImagePullers({
      plan,
      nodes: plan.nodes,
      make: (node, queue) => new ImagePuller({ ...common, pulls: pullsOn(node), queue, node }),
      pending,
      imageOf: (job) => jobImage(manifest, job),
      eligible: async (constraints) => {
        const down = new Set(await nodesDown(deps.store).catch((): string[] => []));
        return (await nodes.readyNodes(constraints)).filter((n) => !down.has(n));
      },
      journal: input.journal,
      clock: deps.execute.clock,
    });
  }
  if (deps.imagePulls === undefined) return undefined;
  const queue = (): string[] => pending().map((j) => jobImage(manifest, j));
  return localImages(new ImagePuller({ ...common, pulls: deps.imagePulls, queue }));
}

/** The local executor's plan: one puller on the one engine. */
export function localImages(puller: ImagePuller): BatchImages {
  return {
    start: () => puller.start(),
    close: () => puller.close(),
    snapshot: () => puller.snapshot(),
    whenPulled: async (job, image, run) => {
      const ready = await puller.ready(image, job.job_id);
      try {
        return await afterWait(ready, image, run);
      } finally {
        if (ready.kind === 'ready') puller.release(image);
      }
    },
  };
}
