import { InvalidInputError } from '../../core/errors.js';
import { textRedactor } from '../../core/redaction/redact-text.js';
import {
  DEFAULT_BUDGET_SHARE,
  DEFAULT_IMAGE_PULLS,
  digestRef,
  registryHostOf,
  type ImagePlanRecord,
  type PlannedImage,
} from '../../core/image-plan.js';
import type { Manifest } from '../../core/manifest/schema.js';
import { imagesMissing } from '../image-missing.js';
import type { ImagePulls } from '../ports/image-pulls.js';
import type { ImagePlanner } from './image-check.js';
import type { HostFactsRecord } from '../../core/host-facts.js';
import {
  NO_CREDENTIALS,
  noDockerConfig,
  registryCredentials,
  type RegistryCredentials,
} from './registry-auth.js';
import type { CompressedSize, StartBatchDeps, StartBatchOptions } from './start-batch-types.js';

/**
 * `start`'s image plan (issue 43): every image the engine does not have is resolved in its registry (the engine's
 * distribution API) to the manifest digest it names now, frozen with its compressed size. What cannot be resolved is
 * refused together (E_IMAGE_MISSING, exit 2: the image, the registry's message, the jobs that need it). Nothing is
 * pulled here.
 */
export async function resolveMissingImages(
  missing: readonly string[],
  jobsOf: ReadonlyMap<string, readonly string[]>,
  pulls: ImagePulls,
  credentials: RegistryCredentials,
  sizeOf: CompressedSize,
  bin: string,
  refuse?: (unresolved: ReadonlyMap<string, string>) => Error,
): Promise<Record<string, PlannedImage>> {
  const redact = textRedactor([...credentials.secrets]);
  const planned: Record<string, PlannedImage> = {};
  const unresolved = new Map<string, string>();
  await Promise.all(
    missing.map(async (image) => {
      const auth = credentials.byHost.get(registryHostOf(image));
      try {
        const given = /@(sha256:[0-9a-f]{64})$/.exec(image)?.[1];
        const { digest } = given !== undefined ? { digest: given } : await pulls.distribution(image, auth);
        if (given !== undefined) await pulls.distribution(image, auth); // it must exist there too
        planned[image] = {
          digest,
          ref: digestRef(image, digest),
          compressed_bytes: await sizeOf(image, digest, auth),
        };
      } catch (err) {
        unresolved.set(image, redact(err instanceof Error ? err.message : String(err)).slice(0, 500));
      }
    }),
  );
  if (unresolved.size > 0)
    throw refuse !== undefined
      ? refuse(unresolved)
      : imagesMissing([...unresolved.keys()], jobsOf, bin, unresolved);
  return planned;
}

/** The plan's budget and pace: `capacity.image_disk_bytes`, else a share of the engine data root's free space. */
export function imagePlanRecord(
  manifest: Pick<Manifest, 'capacity'>,
  images: Record<string, PlannedImage>,
  dataRootFreeBytes: number | null,
  pruneOwnImages: boolean,
  /** Swarm: the nodes that pull, each within the budget (`capacity.image_disk_bytes`, which start requires there). */
  nodes?: readonly string[],
): ImagePlanRecord {
  const given = manifest.capacity.image_disk_bytes;
  if (nodes !== undefined && given !== undefined)
    return {
      images,
      budget_bytes: given,
      budget_basis: 'capacity.image_disk_bytes, on each node',
      concurrency: manifest.capacity.image_pulls ?? DEFAULT_IMAGE_PULLS,
      ...(pruneOwnImages ? { prune_own_images: true } : {}),
      nodes: [...nodes],
    };
  const total = Object.values(images).reduce((sum, i) => sum + (i.compressed_bytes ?? 0), 0);
  const [budget, basis] =
    given !== undefined
      ? [given, 'capacity.image_disk_bytes']
      : dataRootFreeBytes !== null
        ? [
            Math.floor(dataRootFreeBytes * DEFAULT_BUDGET_SHARE),
            `${DEFAULT_BUDGET_SHARE * 100} % of the engine data root's free space at start (${dataRootFreeBytes} bytes)`,
          ]
        : [
            Math.max(1, total * 4),
            "the engine data root's free space is unknown: four times the plan's compressed size",
          ];
  return {
    images,
    budget_bytes: budget,
    budget_basis: basis,
    concurrency: manifest.capacity.image_pulls ?? DEFAULT_IMAGE_PULLS,
    ...(pruneOwnImages ? { prune_own_images: true } : {}),
  };
}

/**
 * Issue 43: how `start` resolves the images the engine lacks (an engine with image calls; on a swarm, the manager's):
 * in their registries, with the manifest's credentials. Undefined: missing images are refused as before. A swarm
 * batch that must pull needs `capacity.image_disk_bytes` (each node's budget: a node's free space cannot be read
 * through its engine).
 */
export function planOf(
  deps: StartBatchDeps,
  options: StartBatchOptions,
  manifest: Manifest,
): ImagePlanner | undefined {
  const pulls = deps.imagePulls;
  if (pulls === undefined) return undefined;
  const swarm = options.executor?.kind === 'swarm';
  return async (missing, jobsOf, refuse) => {
    const credentials =
      manifest.registries === undefined
        ? NO_CREDENTIALS
        : await registryCredentials(manifest, options.environment, deps.readDockerConfig ?? noDockerConfig, {
            allowShortSecrets: options.allowShortSecrets === true,
          });
    const sizeOf = deps.compressedSize ?? ((): Promise<null> => Promise.resolve(null));
    const planned = await resolveMissingImages(
      missing,
      jobsOf,
      pulls,
      credentials,
      sizeOf,
      options.bin ?? 'roboguide-eval',
      refuse,
    );
    if (swarm && manifest.capacity.image_disk_bytes === undefined)
      throw new InvalidInputError('E_MANIFEST_INVALID', 'a swarm batch whose nodes must pull images', [
        {
          path: 'capacity.image_disk_bytes',
          rule: `must be set with --executor swarm when a node lacks an image (${Object.keys(planned).length} to pull): it is each node's disk budget for them, and a node's free space cannot be read through its engine`,
        },
      ]);
    return planned;
  };
}

export function dataRootFree(host: HostFactsRecord): number | null {
  return host.engine_data_root_fs.kind === 'known' ? host.engine_data_root_fs.free_bytes : null;
}
