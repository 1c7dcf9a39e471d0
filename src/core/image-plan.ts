/**
 * A batch's image plan (issue 43), the pure part: which registry an image reference names, the reference a pair runs
 * by once `start` froze its digest, how a failed pull is classified, and which images make room for the next pull.
 * The shell (src/app/batch/image-puller.ts) asks the engine and performs what these decide.
 */

/** One image of the plan as `start` froze it (batch.json `image_plan.images[image]`). */
export interface PlannedImage {
  /** The registry's manifest digest (`sha256:…`) the tag named at start. */
  readonly digest: string;
  /** What pairs are created from and what is pulled: `repository@digest`. */
  readonly ref: string;
  /** Compressed bytes (config and layers) the registry reported at start; null when it could not be read. */
  readonly compressed_bytes: number | null;
}

/** batch.json `image_plan`: the images `start` found missing and resolved in the registry. */
export interface ImagePlanRecord {
  readonly images: Readonly<Record<string, PlannedImage>>;
  /** The most bytes the images this batch pulled may hold in the engine at once. */
  readonly budget_bytes: number;
  /** How the budget was set, in words. */
  readonly budget_basis: string;
  /** Images pulled at once. */
  readonly concurrency: number;
  /** `start --prune-own-images`: images the engine had before the batch may be removed too. */
  readonly prune_own_images?: boolean;
  /**
   * Swarm (issue 43): the nodes that pull the plan's images, each on its own engine and within its own
   * `budget_bytes` (the budget is per node). Absent: the local executor's one engine.
   */
  readonly nodes?: readonly string[];
}

/** When no budget is given: this share of the engine data root's free space at start. */
export const DEFAULT_BUDGET_SHARE = 0.5;
/** Images pulled at once unless `capacity.image_pulls` says otherwise. */
export const DEFAULT_IMAGE_PULLS = 2;
/** Tries of one pull (the first and its retries) before it counts as failed. */
export const PULL_ATTEMPTS = 4;
/** The first retry's wait; each later one doubles it. */
export const PULL_BACKOFF_MS = 1_000;
/** Before any pull was measured, an image takes this many times its compressed size in the store. */
export const INITIAL_EXPANSION = 2;

const DOCKER_HUB = 'docker.io';

/** The registry host of an image reference (`docker.io` for a name without one), as the engine reads it. */
export function registryHostOf(image: string): string {
  const slash = image.indexOf('/');
  if (slash < 0) return DOCKER_HUB;
  const first = image.slice(0, slash);
  return first.includes('.') || first.includes(':') || first === 'localhost' ? first : DOCKER_HUB;
}

/** The repository of a reference: without its tag or digest (`host:5000/a/b:tag` → `host:5000/a/b`). */
export function repositoryOf(image: string): string {
  const at = image.indexOf('@');
  const named = at >= 0 ? image.slice(0, at) : image;
  const slash = named.lastIndexOf('/');
  const colon = named.lastIndexOf(':');
  return colon > slash ? named.slice(0, colon) : named;
}

/** The reference a pair runs by: the repository at the frozen digest. */
export function digestRef(image: string, digest: string): string {
  return `${repositoryOf(image)}@${digest}`;
}

/**
 * How a failed pull counts. `unavailable`: the registry could not be reached or answered with a server error (an
 * outage: the batch pauses, nothing is claimed, resume pulls again). `failed`: it answered and refused (unknown
 * manifest, denied, no space): the pairs that need the image fail as infrastructure with `image_pull_failed`.
 */
export type PullFailureKind = 'unavailable' | 'failed';

const OUTAGE =
  /connection refused|no such host|i\/o timeout|timeout|timed out|connection reset|EOF|no route to host|network is unreachable|server misbehaving|unexpected HTTP status: 5\d\d|status code 5\d\d|50[0234] /i;

export function classifyPullFailure(message: string): PullFailureKind {
  if (/no space left on device/i.test(message)) return 'failed';
  return OUTAGE.test(message) ? 'unavailable' : 'failed';
}

/** An image the batch holds in the engine now, as eviction weighs it. */
export interface HeldImage {
  readonly ref: string;
  readonly bytes: number;
  /** When a pair last used it (or it was pulled), epoch ms. */
  readonly lastUsedMs: number;
  /** Dispatch position of the first pending pair that needs it; null: no pending pair does. */
  readonly nextUse: number | null;
  /** A running pair's container uses it. */
  readonly inUse: boolean;
  /** The engine had it before the batch (removed only with `--prune-own-images`). */
  readonly ownedByUser: boolean;
}

/**
 * The images to remove so that `needBytes` more fit under `budget`, given `usedBytes` held now: first those no
 * pending pair needs, least recently used first; then, only for the pair whose turn it is (`forHead`), those needed
 * last (farthest next use first; they are pulled again when their turn comes). Never one a running pair uses, never
 * the user's own unless allowed (and then only one no pending pair needs: it cannot be pulled back). For the head, an image larger than the budget counts as the whole budget (it is pulled
 * once nothing else is held). Null: it cannot fit (wait for a pair to finish).
 */
export function chooseEvictions(
  held: readonly HeldImage[],
  usedBytes: number,
  needBytes: number,
  budget: number,
  options: { readonly forHead: boolean; readonly pruneOwn: boolean },
): HeldImage[] | null {
  if (usedBytes + needBytes <= budget) return [];
  // An image larger than the whole budget is pulled alone: for the head, everything that can go goes (before this,
  // the head waited forever when any other image was held: a deadlock the bench found at a small scale).
  const need = options.forHead ? Math.min(needBytes, budget) : needBytes;
  if (need !== needBytes) return chooseEvictions(held, usedBytes, need, budget, options);
  const removable = held.filter((h) => !h.inUse && (options.pruneOwn || !h.ownedByUser));
  const unneeded = removable.filter((h) => h.nextUse === null).sort((a, b) => a.lastUsedMs - b.lastUsedMs);
  // The user's own images are not in the plan and cannot be pulled back: one a pending pair needs never goes.
  const later = options.forHead
    ? removable
        .filter((h) => h.nextUse !== null && !h.ownedByUser)
        .sort((a, b) => (b.nextUse ?? 0) - (a.nextUse ?? 0))
    : [];
  const chosen: HeldImage[] = [];
  let used = usedBytes;
  for (const h of [...unneeded, ...later]) {
    if (used + needBytes <= budget) break;
    chosen.push(h);
    used -= h.bytes;
  }
  return used + needBytes <= budget ? chosen : null;
}
