import { Transform } from 'node:stream';
import type { TransformCallback } from 'node:stream';
import { compileRedaction } from '../core/redaction/compile.js';
import { StreamRedactor } from '../core/redaction/stream-redactor.js';

/** Schedules one idle callback; returns its cancel function. Injectable for tests. */
export type IdleScheduler = (callback: () => void, delayMs: number) => () => void;

export interface RedactStreamOptions {
  /** Quiet time after which held-back text is re-examined (default 200 ms; 0 disables). */
  readonly idleFlushMs?: number;
  readonly idleScheduler?: IdleScheduler;
}

export const DEFAULT_IDLE_FLUSH_MS = 200;
/** Stream buffer sizes: up to this much queued input is scanned as one batch. */
const BATCH_BYTES = 64 * 1024;

const realScheduler: IdleScheduler = (callback, delayMs) => {
  const timer = setTimeout(callback, delayMs);
  timer.unref();
  return () => clearTimeout(timer);
};

type WriteCallback = (error?: Error | null) => void;

function asBuffer(chunk: unknown): Buffer {
  if (Buffer.isBuffer(chunk)) return chunk;
  if (chunk instanceof Uint8Array) return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  return Buffer.from(String(chunk), 'utf8');
}

/**
 * Writes are acknowledged on the next microtask, so a burst of small writes (one frame per
 * log line) queues up and reaches `_writev` as one batch: one scan and one output chunk per
 * burst instead of per line. Backpressure: when the readable side is full, the acknowledgement
 * waits for `_read`.
 */
class RedactTransform extends Transform {
  readonly #redactor: StreamRedactor;
  readonly #idleFlushMs: number;
  readonly #schedule: IdleScheduler;
  #cancelIdle: (() => void) | null = null;
  #waitingForRead: WriteCallback | null = null;

  constructor(secrets: readonly string[], options: RedactStreamOptions) {
    super({ writableHighWaterMark: BATCH_BYTES, readableHighWaterMark: BATCH_BYTES });
    this.#redactor = new StreamRedactor(compileRedaction(secrets, 'latin1-bytes'));
    this.#idleFlushMs = options.idleFlushMs ?? DEFAULT_IDLE_FLUSH_MS;
    this.#schedule = options.idleScheduler ?? realScheduler;
  }

  override _transform(chunk: unknown, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.#accept(asBuffer(chunk), callback);
  }

  override _write(chunk: unknown, _encoding: BufferEncoding, callback: WriteCallback): void {
    this.#accept(asBuffer(chunk), callback);
  }

  override _writev(chunks: readonly { chunk: unknown }[], callback: WriteCallback): void {
    const buffers: Buffer[] = [];
    for (const { chunk } of chunks) buffers.push(asBuffer(chunk));
    this.#accept(Buffer.concat(buffers), callback);
  }

  override _read(): void {
    const callback = this.#waitingForRead;
    this.#waitingForRead = null;
    callback?.();
  }

  override _flush(callback: TransformCallback): void {
    this.#stopIdle();
    const out = this.#redactor.end();
    callback(null, out.length > 0 ? Buffer.from(out, 'latin1') : undefined);
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.#stopIdle();
    this.#waitingForRead = null;
    callback(error);
  }

  #accept(chunk: Buffer, callback: WriteCallback): void {
    this.#stopIdle();
    let more: boolean;
    try {
      const text = chunk.toString('latin1');
      const out = this.#redactor.push(text);
      more = out === text ? this.push(chunk) : out.length === 0 || this.push(Buffer.from(out, 'latin1'));
    } catch (error) {
      callback(error instanceof Error ? error : new Error(String(error)));
      return;
    }
    if (this.#redactor.pendingLength > 0 && this.#idleFlushMs > 0) {
      this.#cancelIdle = this.#schedule(() => this.#onIdle(), this.#idleFlushMs);
    }
    if (more) queueMicrotask(callback);
    else this.#waitingForRead = callback;
  }

  #onIdle(): void {
    this.#cancelIdle = null;
    if (this.destroyed || this.writableEnded) return;
    const out = this.#redactor.idle();
    if (out.length > 0) this.push(Buffer.from(out, 'latin1'));
  }

  #stopIdle(): void {
    this.#cancelIdle?.();
    this.#cancelIdle = null;
  }
}

/**
 * A byte stream redactor (SPEC §10): masks every resolved secret value in every form listed in
 * docs/secrets.md (raw; percent- and JSON-escaped per character; hex; base64 standard or url-safe at the
 * three alignments, MIME-wrapped too; UTF-16), `Authorization:` values, bearer tokens, common token formats
 * and PEM private key blocks, including across chunk boundaries. Buffer in, Buffer out; bytes that are no
 * secret pass through unchanged (the same Buffer when a write holds nothing suspicious). Apart from idle
 * flushes, the output does not depend on how the input is chunked.
 *
 * Only bytes that could still become part of a match are held back (a secret form in progress: at most its
 * span; a token: at most 64 KiB, longer open matches are emitted masked). After `idleFlushMs` without input, a
 * held open-ended token that already qualifies is emitted masked; a partial secret form stays held until more
 * input or the end of the stream, where a held tail of 4+ bytes that begins a form is masked.
 */
export function createRedactStream(secrets: readonly string[], options: RedactStreamOptions = {}): Transform {
  return new RedactTransform(secrets, options);
}
