import { Writable } from 'node:stream';
import { errnoOf } from '../ports/file-system.js';
import type { FileHandle } from '../ports/file-system.js';

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
}

/** The line appended after the last byte kept when a log reaches its cap (starts with a newline: the cut may be mid-line). */
export function logLimitMarker(limitBytes: number): string {
  return `\n[roboguide-eval] log limit of ${limitBytes} bytes reached: later output was discarded and the pair was stopped\n`;
}

export const DEFAULT_LOG_HIGH_WATER_MARK_BYTES = 64 * 1024;

/**
 * A Writable that streams container log bytes to one open file with bounded memory: at most one
 * write(2) in flight, and the stream's own buffer (≤ highWaterMark, plus one chunk) in front of it.
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
  #inFlight: Promise<void> = Promise.resolve();
  #closing: Promise<void> | undefined;
  readonly #done: Promise<void>;
  #markDone: () => void = () => undefined;

  constructor(handle: FileHandle, options: LogSinkOptions = {}) {
    super({
      highWaterMark: options.highWaterMarkBytes ?? DEFAULT_LOG_HIGH_WATER_MARK_BYTES,
      decodeStrings: true,
    });
    this.#handle = handle;
    this.#bytes = options.initialBytes ?? 0;
    this.#limitBytes = options.limitBytes ?? Number.POSITIVE_INFINITY;
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

  /** Bytes received after a failure and not written. */
  get droppedBytes(): number {
    return this.#droppedBytes;
  }

  get failed(): LogFailure | null {
    return this.#failure;
  }

  get report(): LogCloseReport {
    return { bytes: this.#bytes, closed: this.#closed, failure: this.#failure?.code ?? null, limitExceeded: this.#limitExceeded };
  }

  /** Ends the stream if needed, waits until every accepted byte is written, fsynced and closed. */
  async finish(): Promise<LogCloseReport> {
    if (!this.writableEnded && !this.destroyed) this.end();
    await this.#done;
    return this.report;
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.#track(this.#writeChunk(chunk)).then(() => callback(), callback);
  }

  override _writev(
    chunks: { chunk: Buffer; encoding: BufferEncoding }[],
    callback: (error?: Error | null) => void,
  ): void {
    const bytes = chunks.length === 1 ? chunks[0]!.chunk : Buffer.concat(chunks.map((c) => c.chunk));
    this.#track(this.#writeChunk(bytes)).then(() => callback(), callback);
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

  #track(write: Promise<void>): Promise<void> {
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
        if (written <= 0) throw Object.assign(new Error('write(2) wrote no bytes'), { code: 'EIO' });
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
    await this.#inFlight;
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
