import { canPinImages, type ImagePins } from '../ports/runtime-capabilities.js';
import type { BatchRecord } from './layout.js';

/** A tag `start` pinned that names another image now (or none): the batch keeps running the pinned id. */
export interface MovedImage {
  readonly image: string;
  readonly pinned_id: string;
  /** What the tag names on the engine now; null: the tag is gone. */
  readonly current_id: string | null;
}

/**
 * The pinned tags (batch.json `images`) that moved since `start`: asked of the engine, one inspect per image. A
 * runtime that cannot resolve ids, or an engine that does not answer, reports nothing (never a guess).
 */
export async function movedImages(
  batch: Pick<BatchRecord, 'images'>,
  runtime: ImagePins | object | undefined,
): Promise<MovedImage[]> {
  if (runtime === undefined || !canPinImages(runtime) || batch.images === undefined) return [];
  const moved: MovedImage[] = [];
  for (const [image, pinned] of Object.entries(batch.images)) {
    const current = await runtime.imageId(image).catch(() => pinned);
    if (current !== pinned) moved.push({ image, pinned_id: pinned, current_id: current });
  }
  return moved;
}

/** One line per moved tag, as status, resume and the report say it. */
export function movedImageLine(m: MovedImage): string {
  const now = m.current_id === null ? 'is no longer on the engine' : `now names ${shortId(m.current_id)}`;
  return `image ${m.image} ${now}: this batch keeps running ${shortId(m.pinned_id)}, the image it had at start`;
}

function shortId(id: string): string {
  return id.startsWith('sha256:') ? `sha256:${id.slice(7, 19)}` : id;
}
