// The stream helpers of a pair's logs: a timeout race, and the transforms that join a re-read log to its file.
import { Transform, type TransformCallback } from 'node:stream';
import type { Clock, TimerHandle } from '../ports/clock.js';

export function withTimeout<T>(
  promise: Promise<T>,
  ms: number,
  clock: Pick<Clock, 'setTimer'>,
): Promise<T | 'timeout'> {
  let timer: TimerHandle | undefined;
  return Promise.race([
    promise,
    new Promise<'timeout'>((resolve) => {
      timer = clock.setTimer(ms, () => resolve('timeout'));
    }),
  ]).finally(() => timer?.cancel());
}

type PrefixGap = { readonly cause: 'engine_copy_differs' | 'engine_copy_short'; readonly differs_at: number };

/**
 * Checks the first `skip` bytes of a re-read log against the bytes the file already holds (`prefix`, read back from
 * its first byte) and drops them; passes the rest. When the engine's copy differs from the file, or ends before the
 * file's end, the two cannot be joined: nothing more is written and `onGap` says where (the file keeps its prefix).
 */
export class VerifyPrefix extends Transform {
  #left: number;
  #offset = 0;
  #diverged = false;
  #held: Uint8Array = new Uint8Array(0);
  readonly #prefix: AsyncIterator<Uint8Array>;
  constructor(
    skip: number,
    prefix: AsyncIterable<Uint8Array>,
    private readonly onGap: (gap: PrefixGap) => void,
  ) {
    super();
    this.#left = skip;
    this.#prefix = prefix[Symbol.asyncIterator]();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    this.#check(chunk).then(
      (rest) => done(null, rest),
      (err: unknown) => done(err as Error),
    );
  }

  override _flush(done: TransformCallback): void {
    if (!this.#diverged && this.#left > 0) this.#diverge('engine_copy_short');
    void this.#prefix.return?.();
    done();
  }

  async #check(chunk: Buffer): Promise<Buffer | undefined> {
    if (this.#diverged) return undefined;
    if (this.#left === 0) return chunk;
    let at = 0;
    while (at < chunk.length && this.#left > 0) {
      if (this.#held.length === 0) {
        const next = await this.#prefix.next();
        // The file is shorter than it said when opened (it cannot shrink): treat as a difference, never guess.
        if (next.done === true) return this.#diverge('engine_copy_differs');
        this.#held = next.value;
        continue;
      }
      const n = Math.min(this.#held.length, chunk.length - at, this.#left);
      const ours = chunk.subarray(at, at + n);
      if (Buffer.compare(ours, this.#held.subarray(0, n)) !== 0) {
        let same = 0;
        while (ours[same] === this.#held[same]) same++;
        this.#offset += same;
        return this.#diverge('engine_copy_differs');
      }
      this.#held = this.#held.subarray(n);
      this.#offset += n;
      this.#left -= n;
      at += n;
    }
    if (this.#left === 0) void this.#prefix.return?.();
    return at < chunk.length ? chunk.subarray(at) : undefined;
  }

  #diverge(cause: PrefixGap['cause']): undefined {
    this.#diverged = true;
    this.onGap({ cause, differs_at: this.#offset });
    void this.#prefix.return?.();
    return undefined;
  }
}

/** Drops the first `skip` bytes: the part of a re-read log that is already on disk. */
export class SkipBytes extends Transform {
  #left: number;
  constructor(skip: number) {
    super();
    this.#left = skip;
  }
  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    if (this.#left >= chunk.length) {
      this.#left -= chunk.length;
      done();
      return;
    }
    const rest = this.#left > 0 ? chunk.subarray(this.#left) : chunk;
    this.#left = 0;
    done(null, rest);
  }
}
