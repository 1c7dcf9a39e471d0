import type { Readable, Writable } from 'node:stream';

const HEADER_BYTES = 8;

/** Resolves at the target's next `drain` or `close`, whichever comes first; neither listener outlives the wait. */
function drainOrClose(target: Writable): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      target.off('drain', done);
      target.off('close', done);
      resolve();
    };
    target.on('drain', done);
    target.on('close', done);
  });
}

async function writeWithBackpressure(target: Writable, chunk: Buffer): Promise<void> {
  if (chunk.length === 0 || target.destroyed) return;
  if (!target.write(chunk)) await drainOrClose(target);
}

/**
 * Split Docker's multiplexed stream (8-byte header: stream type, 3 zero bytes, big-endian length) into
 * stdout and stderr, respecting backpressure on both targets so memory stays bounded whatever the volume.
 * Ends both targets when the source ends. Resolves with the number of payload bytes routed to each.
 */
export async function demultiplex(
  source: Readable,
  stdout: Writable,
  stderr: Writable,
): Promise<{ stdout: number; stderr: number }> {
  const counts = { stdout: 0, stderr: 0 };
  let pending: Buffer = Buffer.alloc(0);
  let frameType = 0;
  let frameLeft = 0;
  try {
    for await (const data of source) {
      let chunk: Buffer = pending.length > 0 ? Buffer.concat([pending, data as Buffer]) : (data as Buffer);
      pending = Buffer.alloc(0);
      while (chunk.length > 0) {
        if (frameLeft === 0) {
          if (chunk.length < HEADER_BYTES) {
            pending = Buffer.from(chunk);
            break;
          }
          frameType = chunk[0]!;
          frameLeft = chunk.readUInt32BE(4);
          chunk = chunk.subarray(HEADER_BYTES);
          continue;
        }
        const take = Math.min(frameLeft, chunk.length);
        const payload = chunk.subarray(0, take);
        chunk = chunk.subarray(take);
        frameLeft -= take;
        if (frameType === 2) {
          counts.stderr += take;
          await writeWithBackpressure(stderr, payload);
        } else {
          counts.stdout += take;
          await writeWithBackpressure(stdout, payload);
        }
      }
    }
  } finally {
    stdout.end();
    stderr.end();
  }
  return counts;
}
