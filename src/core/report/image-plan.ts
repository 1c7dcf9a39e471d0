import type { ImagePlanRecord } from '../image-plan.js';
import { pulledOn, reportImageNodes, type ReportImageNode } from './image-plan-nodes.js';

/**
 * The batch's image plan as the report shows it (issue 43): each image `start` froze (digest, compressed size), what
 * the supervisors did with it (pulls, evictions, failures, the pairs that waited for it and how long) from the
 * journal's `image` records, and each pair's wait for its image. Built from batch.json's `image_plan` (no secret:
 * credentials are never written there) and the journal (messages already masked). Pure.
 */
export interface ReportImage {
  readonly image: string;
  readonly digest: string;
  /** What pairs ran by: `repository@digest`. */
  readonly ref: string;
  readonly compressed_bytes: number | null;
  /** Bytes in the engine's store, as the last pull measured them (null: never pulled). */
  readonly store_bytes: number | null;
  readonly pulls: number;
  readonly evictions: number;
  readonly retries: number;
  /** The last pull failure's kind and message (masked), if its pull failed for good. */
  readonly failure: { readonly kind: string; readonly message: string } | null;
  readonly waits: number;
  readonly waited_ms: number;
  /** Swarm only: the nodes it was pulled on. */
  readonly pulled_on?: readonly string[];
}

export interface ReportImagePlan {
  readonly budget_bytes: number;
  readonly budget_basis: string;
  readonly concurrency: number;
  readonly prune_own_images: boolean;
  readonly images: readonly ReportImage[];
  /** Pairs that waited for their image: job id → milliseconds (summed over supervisors). */
  readonly pair_waits: Readonly<Record<string, number>>;
  /** Swarm only (`image_plan.nodes`, or image records naming a `node`): one row per node. */
  readonly nodes?: readonly ReportImageNode[];
}

/** batch.json `image_plan`. */
export type ReportImagePlanInput = ImagePlanRecord;

interface JournalRecord {
  readonly type: string;
  readonly [field: string]: unknown;
}

const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : 0);

/** What the journal told of one image: its pulls, evictions, retries, last failure and the waits for it. */
interface ImageTally {
  store: number | null;
  pulls: number;
  evictions: number;
  retries: number;
  failure: { kind: string; message: string } | null;
  waits: number;
  waited: number;
}

/** Null when the batch has no image plan (every image was on the engine at start). */
export function reportImagePlan(
  plan: ReportImagePlanInput | undefined,
  journal: readonly JournalRecord[],
): ReportImagePlan | null {
  if (plan === undefined) return null;
  const rows = new Map<string, ImageTally>();
  for (const image of Object.keys(plan.images))
    rows.set(image, { store: null, pulls: 0, evictions: 0, retries: 0, failure: null, waits: 0, waited: 0 });
  const pairWaits: Record<string, number> = {};
  for (const e of journal) {
    if (e.type !== 'image' || typeof e['image'] !== 'string') continue;
    const row = rows.get(e['image']);
    if (row !== undefined) tally(row, e, pairWaits);
  }
  const nodes = reportImageNodes(plan.nodes, journal);
  const images = Object.entries(plan.images)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([image, p]): ReportImage => {
      const r = rows.get(image);
      return {
        image,
        digest: p.digest,
        ref: p.ref,
        compressed_bytes: p.compressed_bytes,
        store_bytes: r?.store ?? null,
        pulls: r?.pulls ?? 0,
        evictions: r?.evictions ?? 0,
        retries: r?.retries ?? 0,
        failure: r?.failure ?? null,
        waits: r?.waits ?? 0,
        waited_ms: r?.waited ?? 0,
        ...(nodes !== null ? { pulled_on: pulledOn(nodes, image) } : {}),
      };
    });
  return {
    budget_bytes: plan.budget_bytes,
    budget_basis: plan.budget_basis,
    concurrency: plan.concurrency,
    prune_own_images: plan.prune_own_images === true,
    images,
    pair_waits: pairWaits,
    ...(nodes !== null ? { nodes } : {}),
  };
}

/** One journal `image` record counted into its image's row (a wait also into its pair's). */
function tally(row: ImageTally, e: JournalRecord, pairWaits: Record<string, number>): void {
  switch (e['action']) {
    case 'pulled':
      row.pulls += 1;
      row.store = num(e['bytes']);
      row.failure = null;
      break;
    case 'evicted':
      row.evictions += 1;
      break;
    case 'pull_retry':
      row.retries += 1;
      break;
    case 'pull_failed':
      row.failure = {
        kind: typeof e['kind'] === 'string' ? e['kind'] : 'failed',
        message: typeof e['message'] === 'string' ? e['message'] : '',
      };
      break;
    case 'waited': {
      const waited = num(e['waited_ms']);
      row.waits += 1;
      row.waited += waited;
      if (typeof e['job_id'] === 'string') pairWaits[e['job_id']] = (pairWaits[e['job_id']] ?? 0) + waited;
      break;
    }
    default:
      break;
  }
}
