/** Small helpers of the tar extraction: chunk conversion, error codes, draining and waiting on streams. */
import type { Extract } from 'tar-stream';
import { InternalError } from '../core/errors.js';
import { sanitizeLabel } from './archive-entry-plan.js';

export function toBuffer(chunk: unknown): Buffer {
  if (Buffer.isBuffer(chunk)) return chunk;
  if (typeof chunk === 'string') return Buffer.from(chunk);
  if (chunk instanceof Uint8Array) return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  throw new TypeError(`unexpected chunk type: ${typeof chunk}`);
}

export function codeOf(err: unknown): string {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && !(err instanceof InternalError)) return sanitizeLabel(code); // an internal fault: its message
  return err instanceof Error ? sanitizeLabel(err.message).slice(0, 60) : 'unknown';
}

export function isDestroyable(stream: object): stream is { destroy(): void } {
  return typeof (stream as { destroy?: unknown }).destroy === 'function';
}

/** Reads and discards an entry's data; its size was already checked against the limits. */
export async function drain(entry: AsyncIterable<unknown>): Promise<void> {
  try {
    for await (const _chunk of entry) {
      // discarded
    }
  } catch {
    // The archive failed; the extraction loop records why.
  }
}

export function drainedOrClosed(extractor: Extract): Promise<void> {
  return new Promise((resolveWait) => {
    const done = (): void => {
      extractor.off('drain', done);
      extractor.off('close', done);
      resolveWait();
    };
    extractor.on('drain', done);
    extractor.on('close', done);
  });
}
