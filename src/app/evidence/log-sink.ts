import { Writable } from 'node:stream';
import { errnoOf } from '../ports/file-system.js';
import type { FileHandle } from '../ports/file-system.js';
import { ToolError } from '../../core/errors.js';
import type { Clock, TimerHandle } from '../ports/clock.js';

/** Where a log write failed and with which errno code (`ENOSPC`…). */
export interface LogFailure {
  readonly op: 'write' | 'sync' | 'close';
  readonly code: string;
}

/** The log closing status recorded in result.json (SPEC §4, §10). */
export interface LogCloseReport {
  /** Bytes in the file: the size it had when opened (append) plus every byte written since. */
  readonly bytes: number;
  /** True when the file was fsynced and its descriptor closed. */
  readonly closed: boolean;
  /** The errno code of the first failure (write, fsync or close), or null. */
  readonly failure: string | null;
  /** True when the stream reached `limitBytes`: the file holds the first `limitBytes` bytes and the marker line. */
  readonly limitExceeded: boolean;
}

/** Why a sink asks for its pair to be stopped: the cap was reached, or the file cannot take more bytes. */
export type LogHalt = 'limit_exceeded' | 'write_failed';

export interface LogSinkOptions {
  /** The file's size when opened: bytes count from there when appending. */
  readonly initialBytes?: number;
  readonly highWaterMarkBytes?: number;
  /** Cap on the file's size (before the marker line); bytes past it are dropped. Default: none. */
  readonly limitBytes?: number;
  /**
   * Bytes gathered into one write(2) (default DEFAULT_LOG_BLOCK_BYTES; 0: one write per chunk, as it arrives). A
   * block is written when full, `holdMs` after its first byte, when the cap is reached and at the end.
   */
  readonly blockBytes?: number;
  /** The longest a byte waits in a block before it is written (default DEFAULT_LOG_HOLD_MS). */
  readonly holdMs?: number;
  /** The timer of `holdMs`. */
  readonly clock: Pick<Clock, 'setTimer'>;
}

/** The line appended after the last byte kept when a log reaches its cap (starts with a newline: the cut may be mid-line). */
export function logLimitMarker(limitBytes: number): string {
  return `\n[roboguide-eval] log limit of ${limitBytes} bytes reached: later output was discarded and the pair was stopped\n`;
}

export const DEFAULT_LOG_HIGH_WATER_MARK_BYTES = 64 * 1024;
/** One write(2) per 256 KiB instead of one per engine chunk (docs/benchmarks.md, logs). */
export const DEFAULT_LOG_BLOCK_BYTES = 256 * 1024;
/**
 * How long a partial block is held (ms): 0, the next turn of the event loop's timers. Chunks that arrive together
 * (a busy stream) still share a block; a quiet pair's line is written at once. 50 ms made the unit tests of the
 * reattach paths flaky (about 1 run in 6 of test/unit/app/pair/execute-pair.test.ts): something reads a log file while bytes
 * are held, not yet found; a longer hold needs that found first.
 */
export const DEFAULT_LOG_HOLD_MS = 0;

/**
 * A Writable that streams container log bytes to one open file with bounded memory: bytes are gathered into
 * blocks (`blockBytes`) and written one block per write(2), at most `holdMs` after they arrived; at most one
 * write(2) in flight, one block gathering, and the stream's own buffer (≤ highWaterMark, plus one chunk) in front.
 * A failed write (ENOSPC…) is recorded, not thrown: the sink keeps consuming (and drops) what
 * follows so the container pipeline never stalls nor sees an error. The end of the stream fsyncs
 * and closes the file; `finish()` returns the closing report.
 */
export class LogSink extends Writable {
  readonly #handle: FileHandle;
  #bytes: number;
  #droppedBytes = 0;
  #failure: LogFailure | null = null;
  readonly #limitBytes: number;
  #limitExceeded = false;
  #haltReason: LogHalt | null = null;
  readonly #halted: Promise<LogHalt>;
  #markHalted: (why: LogHalt) => void = () => undefined;
  #closed = false;
  readonly #blockBytes: number;
  readonly #holdMs: number;
  #held: Buffer[] = [];
  #heldBytes = 0;
  /**
   * Gathering memory whose block is written, for the next block (at most two kept): a new 256 KiB Buffer per block
   * costs fresh pages and GC pressure for every log byte. Only the gathered range of one is ever handed to write(2).
   */
  #spareBlocks: Buffer[] = [];
  #holdTimer: TimerHandle | null = null;
  readonly #clock: Pick<Clock, 'setTimer'>;
  #inFlight: Promise<void> = Promise.resolve();
  #closing: Promise<void> | undefined;
  readonly #done: Promise<void>;
  #markDone: () => void = () => undefined;

  constructor(handle: FileHandle, options: LogSinkOptions) {
    super({
      highWaterMark: options.highWaterMarkBytes ?? DEFAULT_LOG_HIGH_WATER_MARK_BYTES,
      decodeStrings: true,
    });
    this.#handle = handle;
    this.#bytes = options.initialBytes ?? 0;
    this.#limitBytes = options.limitBytes ?? Number.POSITIVE_INFINITY;
    this.#blockBytes = options.blockBytes ?? DEFAULT_LOG_BLOCK_BYTES;
    this.#holdMs = options.holdMs ?? DEFAULT_LOG_HOLD_MS;
    this.#clock = options.clock;
    this.#done = new Promise<void>((resolve) => {
      this.#markDone = resolve;
    });
    this.#halted = new Promise<LogHalt>((resolve) => {
      this.#markHalted = resolve;
    });
    // Reopened after a restart with the cap already reached (file = cap + marker): nothing more is written.
    if (this.#bytes >= this.#limitBytes) {
      this.#limitExceeded = true;
      this.#halt('limit_exceeded');
    }
  }

  /**
   * Settles once, when the pair should be stopped: the cap was reached, or a write failed (ENOSPC…) and the
   * rest of the output cannot be kept. Never settles for a sink that takes every byte.
   */
  get halted(): Promise<LogHalt> {
    return this.#halted;
  }

  get limitExceeded(): boolean {
    return this.#limitExceeded;
  }

  get bytes(): number {
    return this.#bytes;
  }

  /** Bytes acknowledged and gathered into the next block, not yet handed to write(2). */
  get heldBytes(): number {
    return this.#heldBytes;
  }

  /** Bytes received after a failure and not written. */
  get droppedBytes(): number {
    return this.#droppedBytes;
  }

  get failed(): LogFailure | null {
    return this.#failure;
  }

  get report(): LogCloseReport {
    return {
      bytes: this.#bytes,
      closed: this.#closed,
      failure: this.#failure?.code ?? null,
      limitExceeded: this.#limitExceeded,
    };
  }

  /** Ends the stream if needed, waits until every accepted byte is written, fsynced and closed. */
  async finish(): Promise<LogCloseReport> {
    if (!this.writableEnded && !this.destroyed) this.end();
    await this.#done;
    return this.report;
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.#accept(chunk, callback);
  }

  override _writev(
    chunks: { chunk: Buffer; encoding: BufferEncoding }[],
    callback: (error?: Error | null) => void,
  ): void {
    const bytes = chunks.length === 1 ? chunks[0]!.chunk : Buffer.concat(chunks.map((c) => c.chunk));
    this.#accept(bytes, callback);
  }

  /**
   * Adds a chunk to the block being gathered. A full block (or one that reaches the cap) is queued for writing at
   * once, and the chunk acknowledged only when the block before it is written, so a slow disk holds the pipeline
   * back with at most one block in flight and one gathering; otherwise the chunk is acknowledged at once and the
   * block is written when the hold time is up.
   */
  #accept(chunk: Buffer, callback: (error?: Error | null) => void): void {
    if (this.#blockBytes <= 0) {
      this.#queue(chunk).then(() => callback(), callback);
      return;
    }
    this.#held.push(chunk);
    this.#heldBytes += chunk.byteLength;
    if (this.#heldBytes >= this.#blockBytes || this.#bytes + this.#heldBytes >= this.#limitBytes) {
      // The full block is queued at once; the chunk is acknowledged when the write before it is done: one block
      // written while the next gathers, never more.
      const previous = this.#inFlight;
      void this.#flushHeld();
      previous.then(() => callback(), callback);
      return;
    }
    this.#holdTimer ??= this.#clock.setTimer(this.#holdMs, () => void this.#flushHeld());
    callback();
  }

  /** Writes the gathered block after the write in flight; resolves once it is written (or dropped). */
  #flushHeld(): Promise<void> {
    this.#holdTimer?.cancel();
    this.#holdTimer = null;
    if (this.#heldBytes === 0) return this.#inFlight;
    if (this.#held.length === 1) {
      const [chunk] = this.#held;
      this.#held = [];
      this.#heldBytes = 0;
      return this.#queue(chunk!);
    }
    const memory = this.#gatheringMemory(this.#heldBytes);
    let at = 0;
    for (const chunk of this.#held) {
      memory.set(chunk, at);
      at += chunk.byteLength;
    }
    this.#held = [];
    this.#heldBytes = 0;
    const write = this.#queue(memory.subarray(0, at));
    const reuse = (): void => {
      if (this.#spareBlocks.length < 2 && this.#closing === undefined) this.#spareBlocks.push(memory);
    };
    void write.then(reuse, reuse);
    return write;
  }

  /** Memory for a block of `bytes`: a spare one that is large enough, or a new one (at least a block's size). */
  #gatheringMemory(bytes: number): Buffer {
    const spare = this.#spareBlocks.findIndex((memory) => memory.byteLength >= bytes);
    if (spare >= 0) return this.#spareBlocks.splice(spare, 1)[0]!;
    return Buffer.allocUnsafeSlow(Math.max(bytes, this.#blockBytes));
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.#closeOnce().then(() => callback(), callback);
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.#closeOnce().then(
      () => callback(error),
      () => callback(error),
    );
  }

  /** Runs one write after the one in flight (never two at once; `#writeChunk` records failures, never rejects). */
  #queue(bytes: Uint8Array): Promise<void> {
    const write = this.#inFlight.then(() => this.#writeChunk(bytes));
    this.#inFlight = write;
    return write;
  }

  async #writeChunk(chunk: Uint8Array): Promise<void> {
    if (this.#limitExceeded || this.#failure !== null) {
      this.#droppedBytes += chunk.byteLength;
      return;
    }
    const room = this.#limitBytes - this.#bytes;
    const kept = room < chunk.byteLength ? chunk.subarray(0, room) : chunk;
    const offset = await this.#writeAll(kept);
    this.#droppedBytes += chunk.byteLength - offset;
    if (this.#failure !== null) {
      this.#halt('write_failed');
    } else if (kept !== chunk) {
      this.#limitExceeded = true;
      // The marker goes past the cap (the file holds cap + marker); if it cannot be written, that is recorded.
      await this.#writeAll(new TextEncoder().encode(logLimitMarker(this.#limitBytes)));
      this.#halt('limit_exceeded');
    }
  }

  /** Writes until done or the first failure (recorded); returns the bytes of `bytes` written. */
  async #writeAll(bytes: Uint8Array): Promise<number> {
    let offset = 0;
    try {
      while (this.#failure === null && offset < bytes.byteLength) {
        const written = await this.#handle.write(bytes.subarray(offset));
        if (written <= 0) throw new ToolError('EIO', 'write(2) wrote no bytes');
        offset += written;
        this.#bytes += written;
      }
    } catch (err) {
      this.#failure = { op: 'write', code: errnoOf(err) ?? 'EIO' };
    }
    return offset;
  }

  #halt(why: LogHalt): void {
    if (this.#haltReason !== null) return;
    this.#haltReason = why;
    this.#markHalted(why);
  }

  #closeOnce(): Promise<void> {
    this.#closing ??= this.#syncAndClose().finally(() => this.#markDone());
    return this.#closing;
  }

  async #syncAndClose(): Promise<void> {
    await this.#flushHeld();
    this.#spareBlocks = [];
    let synced = false;
    try {
      await this.#handle.sync();
      synced = true;
    } catch (err) {
      this.#failure ??= { op: 'sync', code: errnoOf(err) ?? 'EIO' };
    }
    try {
      await this.#handle.close();
      this.#closed = synced;
    } catch (err) {
      this.#failure ??= { op: 'close', code: errnoOf(err) ?? 'EIO' };
    }
  }
}
