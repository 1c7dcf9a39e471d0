import { describe, expect, it } from 'vitest';
import { systemClock } from '../../src/adapters/system-clock.js';
import { LogSink, logLimitMarker } from '../../src/app/evidence/log-sink.js';
import type { FileHandle } from '../../src/app/ports/file-system.js';

/**
 * LogSink over a hand-written file handle: the write(2) answers a real file rarely gives (short writes, zero bytes,
 * an error without an errno code, a failing close), and the report each leaves.
 */
class ScriptedHandle implements FileHandle {
  readonly path = '/fake/stdout.log';
  readonly bytes: number[] = [];
  writes = 0;
  syncs = 0;
  closes = 0;
  /** Per write call (0-based): what it does instead of writing everything. */
  readonly script = new Map<number, 'short' | 'zero' | Error>();
  syncError: Error | null = null;
  closeError: Error | null = null;

  write(bytes: Uint8Array): Promise<number> {
    const step = this.script.get(this.writes++);
    if (step instanceof Error) return Promise.reject(step);
    if (step === 'zero') return Promise.resolve(0);
    const n = step === 'short' ? Math.max(1, Math.floor(bytes.byteLength / 2)) : bytes.byteLength;
    this.bytes.push(...bytes.subarray(0, n));
    return Promise.resolve(n);
  }
  sync(): Promise<void> {
    this.syncs++;
    return this.syncError === null ? Promise.resolve() : Promise.reject(this.syncError);
  }
  truncate(): Promise<void> {
    return Promise.resolve();
  }
  close(): Promise<void> {
    this.closes++;
    return this.closeError === null ? Promise.resolve() : Promise.reject(this.closeError);
  }
  text(): string {
    return Buffer.from(this.bytes).toString('utf8');
  }
}

function write(sink: LogSink, chunk: string): Promise<void> {
  return new Promise((resolve, reject) =>
    sink.write(Buffer.from(chunk), (err) => (err ? reject(err) : resolve())),
  );
}

describe('LogSink over a scripted handle', () => {
  it('a short write is continued until the chunk is in the file', async () => {
    const handle = new ScriptedHandle();
    handle.script.set(0, 'short');
    const sink = new LogSink(handle, { clock: systemClock });
    await write(sink, 'abcdefgh');
    expect(await sink.finish()).toEqual({ bytes: 8, closed: true, failure: null, limitExceeded: false });
    expect(handle.text()).toBe('abcdefgh');
    expect(handle.writes).toBe(2);
  });

  it('a write(2) that writes nothing is an EIO failure: the rest is dropped and the pair asked to stop', async () => {
    const handle = new ScriptedHandle();
    handle.script.set(1, 'zero');
    const sink = new LogSink(handle, { clock: systemClock, blockBytes: 0 }); // one write(2) per chunk
    await write(sink, 'one\n');
    await write(sink, 'two\n');
    await write(sink, 'three\n');
    await expect(sink.halted).resolves.toBe('write_failed');
    expect(await sink.finish()).toEqual({ bytes: 4, closed: true, failure: 'EIO', limitExceeded: false });
    expect(sink.droppedBytes).toBe(10);
    expect(sink.failed).toEqual({ op: 'write', code: 'EIO' });
    expect(handle.text()).toBe('one\n');
  });

  it('an error without an errno code is recorded as EIO', async () => {
    const handle = new ScriptedHandle();
    handle.script.set(0, new Error('no code'));
    const sink = new LogSink(handle, { clock: systemClock });
    await write(sink, 'x');
    expect((await sink.finish()).failure).toBe('EIO');
  });

  it('chunks corked together are written as one, and the cap cuts inside them', async () => {
    const handle = new ScriptedHandle();
    const sink = new LogSink(handle, { clock: systemClock, limitBytes: 5 });
    sink.cork();
    sink.write(Buffer.from('abc'));
    sink.write(Buffer.from('def'));
    sink.uncork();
    expect(await sink.finish()).toMatchObject({ limitExceeded: true, failure: null, closed: true });
    expect(handle.text()).toBe(`abcde${logLimitMarker(5)}`);
    expect(handle.writes).toBe(2);
    expect(sink.droppedBytes).toBe(1);
  });

  it('a marker that cannot be written is recorded; the cap is still reported and the stop asked', async () => {
    const handle = new ScriptedHandle();
    handle.script.set(1, Object.assign(new Error('disk full'), { code: 'ENOSPC' }));
    const sink = new LogSink(handle, { clock: systemClock, limitBytes: 3 });
    await write(sink, 'abcdef');
    await expect(sink.halted).resolves.toBe('limit_exceeded');
    expect(await sink.finish()).toEqual({ bytes: 3, closed: true, failure: 'ENOSPC', limitExceeded: true });
    expect(handle.text()).toBe('abc');
  });

  it('a close that fails is recorded and the file not reported closed; the first failure is the one kept', async () => {
    const handle = new ScriptedHandle();
    handle.closeError = Object.assign(new Error('bad fd'), { code: 'EBADF' });
    const sink = new LogSink(handle, { clock: systemClock });
    await write(sink, 'x');
    expect(await sink.finish()).toEqual({ bytes: 1, closed: false, failure: 'EBADF', limitExceeded: false });

    const both = new ScriptedHandle();
    both.syncError = new Error('no code either');
    both.closeError = Object.assign(new Error('bad fd'), { code: 'EBADF' });
    const sink2 = new LogSink(both, { clock: systemClock });
    expect(await sink2.finish()).toEqual({ bytes: 0, closed: false, failure: 'EIO', limitExceeded: false });
    expect(sink2.failed).toEqual({ op: 'sync', code: 'EIO' });
  });

  it('finish after a destroy, and a second finish, close the file once', async () => {
    const handle = new ScriptedHandle();
    const sink = new LogSink(handle, { clock: systemClock });
    await write(sink, 'abc');
    sink.destroy();
    expect(await sink.finish()).toEqual({ bytes: 3, closed: true, failure: null, limitExceeded: false });
    expect(await sink.finish()).toEqual({ bytes: 3, closed: true, failure: null, limitExceeded: false });
    expect(handle.closes).toBe(1);
    expect(handle.syncs).toBe(1);
  });

  it('a destroy while the close fails still ends the stream', async () => {
    const handle = new ScriptedHandle();
    handle.syncError = Object.assign(new Error('io'), { code: 'EIO' });
    handle.closeError = Object.assign(new Error('bad fd'), { code: 'EBADF' });
    const sink = new LogSink(handle, { clock: systemClock, initialBytes: 10 });
    sink.destroy();
    expect(await sink.finish()).toEqual({ bytes: 10, closed: false, failure: 'EIO', limitExceeded: false });
  });

  describe('blocks (one write(2) per block, not per chunk)', () => {
    it('gathers small chunks into one write, queued as soon as the block fills', async () => {
      const handle = new ScriptedHandle();
      const sink = new LogSink(handle, { clock: systemClock, blockBytes: 64, holdMs: 60_000 });
      await write(sink, 'a'.repeat(30));
      await write(sink, 'b'.repeat(30));
      expect(handle.writes).toBe(0);
      expect(sink.heldBytes).toBe(60);
      await write(sink, 'c'.repeat(30));
      await new Promise((resolve) => setImmediate(resolve));
      expect(handle.writes).toBe(1);
      expect(sink.heldBytes).toBe(0);
      expect(handle.text()).toBe(`${'a'.repeat(30)}${'b'.repeat(30)}${'c'.repeat(30)}`);
      expect(await sink.finish()).toEqual({ bytes: 90, closed: true, failure: null, limitExceeded: false });
      expect(handle.writes).toBe(1);
    });

    it('writes a partial block after the hold time, without waiting for more input or the end', async () => {
      const handle = new ScriptedHandle();
      const sink = new LogSink(handle, { clock: systemClock, blockBytes: 1024, holdMs: 10 });
      await write(sink, 'last line of a quiet pair\n');
      expect(handle.writes).toBe(0);
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(handle.writes).toBe(1);
      expect(handle.text()).toBe('last line of a quiet pair\n');
      expect(sink.writableEnded).toBe(false);
      expect(await sink.finish()).toMatchObject({ bytes: 26, closed: true });
      expect(handle.syncs).toBe(1);
    });

    it('a block that reaches the cap is written at once: the stop is asked without waiting for the hold time', async () => {
      const handle = new ScriptedHandle();
      const sink = new LogSink(handle, {
        clock: systemClock,
        blockBytes: 1024,
        holdMs: 60_000,
        limitBytes: 10,
      });
      await write(sink, '12345');
      expect(handle.writes).toBe(0);
      await write(sink, '67890abc');
      await expect(sink.halted).resolves.toBe('limit_exceeded');
      expect(handle.text()).toBe(`1234567890${logLimitMarker(10)}`);
      expect(await sink.finish()).toMatchObject({
        bytes: 10 + logLimitMarker(10).length,
        limitExceeded: true,
      });
    });

    it('a block write that fails stops the pair and drops what follows', async () => {
      const handle = new ScriptedHandle();
      handle.script.set(0, 'zero');
      const sink = new LogSink(handle, { clock: systemClock, blockBytes: 8, holdMs: 60_000 });
      await write(sink, 'abcdefgh');
      await expect(sink.halted).resolves.toBe('write_failed');
      await write(sink, 'more');
      expect(await sink.finish()).toEqual({ bytes: 0, closed: true, failure: 'EIO', limitExceeded: false });
      expect(sink.droppedBytes).toBe(12);
    });

    it('a destroy writes the held block before the file is closed (acknowledged bytes are never lost)', async () => {
      const handle = new ScriptedHandle();
      const sink = new LogSink(handle, { clock: systemClock, blockBytes: 1024, holdMs: 60_000 });
      await write(sink, 'held\n');
      sink.destroy();
      expect(await sink.finish()).toMatchObject({ bytes: 5, closed: true, failure: null });
      expect(handle.text()).toBe('held\n');
      expect(handle.closes).toBe(1);
    });
    it('one block written while the next gathers: a full block waits for the write before it', async () => {
      let release: () => void = () => undefined;
      const handle = new ScriptedHandle();
      const slow = handle.write.bind(handle);
      let calls = 0;
      handle.write = (bytes: Uint8Array): Promise<number> => {
        calls += 1;
        if (calls > 1) return slow(bytes);
        return new Promise((resolve) => (release = () => resolve(slow(bytes))));
      };
      const sink = new LogSink(handle, { clock: systemClock, blockBytes: 4, holdMs: 60_000 });
      await write(sink, 'aaaa'); // block 1 queued, its write held; acknowledged (nothing was in flight before it)
      let acknowledged = false;
      const second = write(sink, 'bbbb').then(() => (acknowledged = true)); // block 2 waits for block 1
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(acknowledged).toBe(false);
      release();
      await second;
      expect(await sink.finish()).toMatchObject({ bytes: 8, closed: true });
      expect(handle.text()).toBe('aaaabbbb');
    });
  });

  it('gathers blocks into memory it reuses once the block before is written, and writes every byte in order', async () => {
    const handle = new ScriptedHandle();
    const memory: ArrayBufferLike[] = [];
    const write0 = handle.write.bind(handle);
    handle.write = (bytes: Uint8Array) => {
      memory.push(bytes.buffer);
      return write0(bytes);
    };
    handle.script.set(3, 'short'); // a short write in the middle: the rest of that block follows from the same memory
    const never = { cancel: () => undefined };
    // The hold time never ends: blocks are written when full and at the end only.
    const timers = { sleep: () => Promise.resolve(), setTimer: () => never, setInterval: () => never };
    const sink = new LogSink(handle, { blockBytes: 40_000, clock: timers });
    const chunks = Array.from(
      { length: 100 },
      (_, i) => `${String(i).padStart(3, '0')}-${'x'.repeat(3995)}|`,
    );
    for (const chunk of chunks) await write(sink, chunk);
    expect(await sink.finish()).toMatchObject({ bytes: 400_000, closed: true, failure: null });
    expect(handle.text()).toBe(chunks.join(''));
    expect(memory.length).toBeGreaterThan(8);
    expect(new Set(memory).size).toBeLessThanOrEqual(3);
  });
});
