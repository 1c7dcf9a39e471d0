import { finished, type Readable, type Writable } from 'node:stream';

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
 * The source's chunks one at a time, each as it was pushed. A `for await` over a Readable reads in paused mode, where
 * `read()` joins everything buffered into one new Buffer: under load (the engine ahead of the disk) a copy of every
 * log byte. In flowing mode a read takes the head chunk as it is; the source is paused after each chunk and resumed
 * only when the consumer asks for the next, so backpressure is unchanged. Ends like `for await`: the source's error, or
 * a close without `end` (ERR_STREAM_PREMATURE_CLOSE), rejects; the source is destroyed when the loop ends.
 */
async function* chunksOf(source: Readable): AsyncGenerator<Buffer> {
  const queue: Buffer[] = [];
  /** Set by `finished`: the source ended (failure null) or failed. */
  const end: { settled: boolean; failure: Error | null } = { settled: false, failure: null };
  let wake: (() => void) | null = null;
  const notify = (): void => {
    const resolve = wake;
    wake = null;
    resolve?.();
  };
  const onData = (data: Buffer): void => {
    queue.push(data);
    source.pause();
    notify();
  };
  const stopWatching = finished(source, { writable: false }, (err) => {
    end.settled = true;
    end.failure = err ?? null;
    notify();
  });
  source.pause();
  source.on('data', onData);
  try {
    for (;;) {
      if (end.failure !== null) throw end.failure;
      const next = queue.shift();
      if (next !== undefined) {
        yield next;
        continue;
      }
      if (end.settled) return;
      await new Promise<void>((resolve) => {
        wake = resolve;
        source.resume();
      });
    }
  } finally {
    stopWatching();
    source.off('data', onData);
    source.destroy(); // as `for await` does at its end (sources destroy themselves after `end` anyway)
  }
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
    for await (const data of chunksOf(source)) {
      let chunk: Buffer = pending.length > 0 ? Buffer.concat([pending, data]) : data;
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
