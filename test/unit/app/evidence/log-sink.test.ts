import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { systemClock } from '../../../../src/adapters/system-clock.js';
import { EvidenceStore } from '../../../../src/app/evidence/evidence-store.js';
import {
  DEFAULT_LOG_BLOCK_BYTES,
  logLimitMarker,
  type LogSink,
} from '../../../../src/app/evidence/log-sink.js';
import { NodeFileSystem } from '../../../../src/adapters/fs/node-file-system.js';
import { FaultyFileSystem } from '../../../support/faulty-file-system.js';

let tmp: string;
let root: string;
let fs: FaultyFileSystem;
let store: EvidenceStore;

beforeEach(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'rg-log-'));
  root = join(tmp, 'D');
  fs = new FaultyFileSystem(new NodeFileSystem());
  await EvidenceStore.createOutputDir(fs, root);
  store = new EvidenceStore(fs, root);
});

afterEach(async () => {
  await rm(tmp, { recursive: true, force: true });
});

/** Writes one chunk and waits for the sink to accept it (one write(2) per chunk). */
function writeOne(sink: LogSink, chunk: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    sink.write(chunk, (err) => (err ? reject(err) : resolve()));
  });
}

describe('LogSink', () => {
  it('streams bytes to a new 0600 file and closes it with a report', async () => {
    const sink = await store.openLog('stdout.log', { clock: systemClock });
    await pipeline(Readable.from([Buffer.from('line 1\n'), Buffer.from('line 2\n')]), sink);
    expect(await sink.finish()).toEqual({ bytes: 14, closed: true, failure: null, limitExceeded: false });
    expect(await readFile(join(root, 'stdout.log'), 'utf8')).toBe('line 1\nline 2\n');
    expect((await stat(join(root, 'stdout.log'))).mode & 0o777).toBe(0o600);
    expect(fs.count('sync', /stdout\.log$/)).toBe(1);
    expect(fs.count('close', /stdout\.log$/)).toBe(1);
  });

  it('on ENOSPC records the failure, counts only written bytes and keeps consuming', async () => {
    fs.addRule({
      op: 'write',
      path: /stderr\.log$/,
      nth: 3,
      when: 'partial',
      partialBytes: 100,
      code: 'ENOSPC',
    });
    const sink = await store.openLog('stderr.log', { clock: systemClock, blockBytes: 0 }); // one write(2) per chunk
    const errors: unknown[] = [];
    sink.on('error', (err) => errors.push(err));
    for (let i = 0; i < 5; i += 1) await writeOne(sink, Buffer.alloc(1000, 0x61 + i));
    expect(sink.failed).toEqual({ op: 'write', code: 'ENOSPC' });
    expect(await sink.finish()).toEqual({
      bytes: 2100,
      closed: true,
      failure: 'ENOSPC',
      limitExceeded: false,
    });
    expect(sink.droppedBytes).toBe(2900);
    expect(errors).toEqual([]);
    expect((await stat(join(root, 'stderr.log'))).size).toBe(2100);
    expect(fs.count('write', /stderr\.log$/)).toBe(4);
  });

  it('lets a pipeline complete when the very first write fails', async () => {
    fs.addRule({ op: 'write', path: /stdout\.log$/, code: 'ENOSPC' });
    const sink = await store.openLog('stdout.log', { clock: systemClock });
    let produced = 0;
    async function* source(): AsyncGenerator<Buffer> {
      for (; produced < 50; produced += 1) yield await Promise.resolve(Buffer.alloc(4096, 0x62));
    }
    await pipeline(source(), sink);
    expect(produced).toBe(50);
    expect(await sink.finish()).toEqual({ bytes: 0, closed: true, failure: 'ENOSPC', limitExceeded: false });
  });

  it('reports closed: false when the final fsync fails', async () => {
    fs.addRule({ op: 'sync', path: /stdout\.log$/, code: 'EIO' });
    const sink = await store.openLog('stdout.log', { clock: systemClock });
    await writeOne(sink, Buffer.from('abc'));
    expect(await sink.finish()).toEqual({ bytes: 3, closed: false, failure: 'EIO', limitExceeded: false });
    expect(fs.count('close', /stdout\.log$/)).toBe(1);
  });

  it('closes the file when the source fails mid-stream', async () => {
    const sink = await store.openLog('stdout.log', { clock: systemClock });
    async function* source(): AsyncGenerator<Buffer> {
      yield Buffer.from('partial\n');
      await Promise.resolve();
      throw new Error('engine stream broke');
    }
    await expect(pipeline(source(), sink)).rejects.toThrow('engine stream broke');
    expect(await sink.finish()).toEqual({ bytes: 8, closed: true, failure: null, limitExceeded: false });
    expect(await readFile(join(root, 'stdout.log'), 'utf8')).toBe('partial\n');
  });

  it('appends after a restart, counting bytes from the existing size', async () => {
    await writeFile(join(root, 'stdout.log'), '0123456789');
    const sink = await store.openLog('stdout.log', { clock: systemClock, append: true });
    await writeOne(sink, Buffer.from('abcde'));
    expect(await sink.finish()).toEqual({ bytes: 15, closed: true, failure: null, limitExceeded: false });
    expect(await readFile(join(root, 'stdout.log'), 'utf8')).toBe('0123456789abcde');
  });

  it('refuses to open an existing log without append, leaving it untouched', async () => {
    await writeFile(join(root, 'stdout.log'), 'evidence');
    await expect(store.openLog('stdout.log', { clock: systemClock })).rejects.toMatchObject({
      code: 'E_STORE',
      context: { path: 'stdout.log', syscall: 'open', errno: 'EEXIST' },
    });
    expect(await readFile(join(root, 'stdout.log'), 'utf8')).toBe('evidence');
  });

  it('streams 20 MiB with bounded buffering and one write in flight', async () => {
    const chunkBytes = 64 * 1024;
    const totalBytes = 20 * 1024 * 1024;
    const sink = await store.openLog('big.log', { clock: systemClock });
    const chunk = Buffer.alloc(chunkBytes, 0x7a);
    let maxBufferedBytes = 0;
    async function* source(): AsyncGenerator<Buffer> {
      for (let sent = 0; sent < totalBytes; sent += chunkBytes) {
        maxBufferedBytes = Math.max(maxBufferedBytes, sink.writableLength + sink.heldBytes);
        yield await Promise.resolve(chunk);
      }
    }
    await pipeline(source(), sink);
    expect(await sink.finish()).toEqual({
      bytes: totalBytes,
      closed: true,
      failure: null,
      limitExceeded: false,
    });
    expect((await stat(join(root, 'big.log'))).size).toBe(totalBytes);
    expect(maxBufferedBytes).toBeLessThanOrEqual(
      sink.writableHighWaterMark + DEFAULT_LOG_BLOCK_BYTES + chunkBytes,
    );
    expect(fs.maxInFlight('write')).toBe(1);
    // One write(2) per block, not per chunk (a block holds four of these chunks).
    expect(fs.count('write', /big\.log$/)).toBe(totalBytes / DEFAULT_LOG_BLOCK_BYTES);
  });

  describe('log_limit_bytes', () => {
    it('keeps the first limit bytes, appends the marker line, drops the rest and asks for a stop', async () => {
      const sink = await store.openLog('stdout.log', { clock: systemClock, limitBytes: 2500 });
      let halted: string | null = null;
      void sink.halted.then((why) => (halted = why));
      for (let i = 0; i < 5; i += 1) await writeOne(sink, Buffer.alloc(1000, 0x61 + i));
      const marker = logLimitMarker(2500);
      expect(await sink.finish()).toEqual({
        bytes: 2500 + marker.length,
        closed: true,
        failure: null,
        limitExceeded: true,
      });
      const text = await readFile(join(root, 'stdout.log'), 'utf8');
      expect(text).toBe('a'.repeat(1000) + 'b'.repeat(1000) + 'c'.repeat(500) + marker);
      expect(sink.droppedBytes).toBe(2500);
      expect(halted).toBe('limit_exceeded');
    });

    it('a stream of exactly the limit is not over it', async () => {
      const sink = await store.openLog('stdout.log', { clock: systemClock, limitBytes: 2000 });
      for (let i = 0; i < 2; i += 1) await writeOne(sink, Buffer.alloc(1000, 0x61));
      expect(await sink.finish()).toEqual({ bytes: 2000, closed: true, failure: null, limitExceeded: false });
    });

    it('reopened after a restart with the cap already reached, writes nothing more and asks for a stop at once', async () => {
      const before = 'x'.repeat(100) + logLimitMarker(100);
      await writeFile(join(root, 'stdout.log'), before);
      const sink = await store.openLog('stdout.log', { clock: systemClock, append: true, limitBytes: 100 });
      expect(await sink.halted).toBe('limit_exceeded');
      await writeOne(sink, Buffer.from('more'));
      expect(await sink.finish()).toMatchObject({ bytes: before.length, limitExceeded: true });
      expect(await readFile(join(root, 'stdout.log'), 'utf8')).toBe(before);
    });

    it('a failed write (ENOSPC) also asks for a stop, keeping what was written', async () => {
      fs.addRule({ op: 'write', path: /stdout\.log$/, nth: 2, when: 'before', code: 'ENOSPC' });
      const sink = await store.openLog('stdout.log', {
        clock: systemClock,
        limitBytes: 1_000_000,
        blockBytes: 0,
      });
      await writeOne(sink, Buffer.from('kept\n'));
      await writeOne(sink, Buffer.from('lost\n'));
      expect(await sink.halted).toBe('write_failed');
      expect(await sink.finish()).toEqual({
        bytes: 5,
        closed: true,
        failure: 'ENOSPC',
        limitExceeded: false,
      });
      expect(await readFile(join(root, 'stdout.log'), 'utf8')).toBe('kept\n');
    });
  });
});
