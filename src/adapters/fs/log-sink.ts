import { Writable } from 'node:stream';
import { errnoOf } from '../../app/ports/file-system.js';
import type { FileHandle } from '../../app/ports/file-system.js';

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
}

export interface LogSinkOptions {
  /** The file's size when opened: bytes count from there when appending. */
  readonly initialBytes?: number;
  readonly highWaterMarkBytes?: number;
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
    this.#done = new Promise<void>((resolve) => {
      this.#markDone = resolve;
    });
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
    return { bytes: this.#bytes, closed: this.#closed, failure: this.#failure?.code ?? null };
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
    let offset = 0;
    try {
      while (this.#failure === null && offset < chunk.byteLength) {
        const written = await this.#handle.write(chunk.subarray(offset));
        if (written <= 0) throw Object.assign(new Error('write(2) wrote no bytes'), { code: 'EIO' });
        offset += written;
        this.#bytes += written;
      }
    } catch (err) {
      this.#failure = { op: 'write', code: errnoOf(err) ?? 'EIO' };
    }
    this.#droppedBytes += chunk.byteLength - offset;
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
