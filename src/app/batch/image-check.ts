import type { Manifest } from '../../core/manifest/schema.js';
import { jobImage } from '../../core/manifest/parse.js';
import type { PlannedImage } from '../../core/image-plan.js';
import { imagesMissing, imagesMissingOnNodes } from '../image-missing.js';
import type { ContainerRuntime, ImageNodes } from '../ports/container-runtime.js';
import { canPinImages, canPlaceImages } from '../ports/runtime-capabilities.js';

/** Resolves the missing images in their registries; `refuse` builds the refusal of those no registry resolves. */
export type ImagePlanner = (
  missing: string[],
  jobsOf: Map<string, string[]>,
  refuse?: (unresolved: ReadonlyMap<string, string>) => Error,
) => Promise<Record<string, PlannedImage>>;

export interface EngineImages {
  /** image → id on this engine (the local executor's pins). */
  readonly pins: Record<string, string>;
  /** Issue 43: the images the engine lacked, resolved in their registries. */
  readonly planned: Record<string, PlannedImage>;
  /** Swarm (issue 43): image → the nodes whose engines hold it at start. */
  readonly nodes?: Record<string, string[]>;
}

/**
 * The manifest's images on the engine at start: each pinned to its id; the missing ones planned (pulled by the
 * supervisor) when a planner is given, else refused together (E_IMAGE_MISSING, exit 2, with the jobs that need each).
 * On a swarm, every configured node is asked and the nodes holding each image are recorded; an image some node lacks
 * is planned when a planner is given (the nodes pull it ahead, each for its own pairs), else refused naming the nodes
 * that lack it and those that hold it (so is one its registry cannot resolve, with the registry's answer).
 */
export async function checkImages(
  runtime: ContainerRuntime,
  manifest: Manifest,
  bin: string,
  plan?: ImagePlanner,
): Promise<EngineImages> {
  const jobsOf = new Map<string, string[]>();
  for (const job of manifest.jobs) {
    const image = jobImage(manifest, job);
    jobsOf.set(image, [...(jobsOf.get(image) ?? []), job.job_id]);
  }
  const onNodes = await nodesOf(runtime, [...jobsOf.keys()]);
  if (onNodes !== null) {
    const lacking = new Map([...onNodes].filter(([, where]) => where.absent.length > 0));
    if (lacking.size > 0 && plan === undefined) throw imagesMissingOnNodes(lacking, jobsOf);
    const planned =
      lacking.size > 0 && plan !== undefined
        ? await plan([...lacking.keys()], jobsOf, (unresolved) =>
            imagesMissingOnNodes(
              new Map([...lacking].filter(([image]) => unresolved.has(image))),
              jobsOf,
              unresolved,
            ),
          )
        : {};
    return {
      pins: {},
      planned,
      nodes: Object.fromEntries([...onNodes].map(([image, where]) => [image, [...where.present]])),
    };
  }
  const pins: Record<string, string> = {};
  const missing: string[] = [];
  for (const image of jobsOf.keys()) {
    const id = canPinImages(runtime)
      ? await runtime.imageId(image)
      : (await runtime.imageExists(image))
        ? image
        : null;
    if (id === null) missing.push(image);
    else if (id.startsWith('sha256:')) pins[image] = id;
  }
  if (missing.length > 0 && plan === undefined) throw imagesMissing(missing, jobsOf, bin);
  const planned = missing.length > 0 && plan !== undefined ? await plan(missing, jobsOf) : {};
  return { pins, planned };
}

/** Per image, the nodes holding it and those lacking it; null when the runtime is one engine (no nodes). */
async function nodesOf(
  runtime: ContainerRuntime,
  images: readonly string[],
): Promise<Map<string, ImageNodes> | null> {
  if (!canPlaceImages(runtime)) return null;
  const out = new Map<string, ImageNodes>();
  for (const image of images) {
    const where = await runtime.imageNodes(image);
    if (where === null) return null;
    out.set(image, where);
  }
  return out;
}
