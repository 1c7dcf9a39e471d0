import { PassThrough, Readable, Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { demultiplex } from '../../../../src/adapters/docker/demux.js';

function frame(stream: 1 | 2, payload: Buffer): Buffer {
  const header = Buffer.alloc(8);
  header[0] = stream;
  header.writeUInt32BE(payload.length, 4);
  return Buffer.concat([header, payload]);
}

/** A slow sink with a tiny buffer: every write past the first asks the writer to wait for 'drain'. */
function slowSink(): Writable & { received: Buffer[] } {
  const received: Buffer[] = [];
  const sink = new Writable({
    highWaterMark: 16,
    write(chunk: Buffer, _enc, done) {
      received.push(chunk);
      setImmediate(done);
    },
  });
  return Object.assign(sink, { received });
}

describe('demultiplex', () => {
  it('routes frames split at any byte to stdout and stderr, byte-exact', async () => {
    const frames = Buffer.concat([
      frame(1, Buffer.from('out-1\n')),
      frame(2, Buffer.from('err-1\n')),
      frame(1, Buffer.from('out-2\n')),
    ]);
    const chunks = [...frames].map((b) => Buffer.from([b])); // one byte at a time: headers split everywhere
    const out = new PassThrough();
    const err = new PassThrough();
    const outText: Buffer[] = [];
    const errText: Buffer[] = [];
    out.on('data', (c: Buffer) => outText.push(c));
    err.on('data', (c: Buffer) => errText.push(c));
    const counts = await demultiplex(Readable.from(chunks), out, err);
    expect(Buffer.concat(outText).toString()).toBe('out-1\nout-2\n');
    expect(Buffer.concat(errText).toString()).toBe('err-1\n');
    expect(counts).toEqual({ stdout: 12, stderr: 6 });
  });

  it('waits for drain without leaving listeners behind, however often it waits', async () => {
    const frames = Array.from({ length: 200 }, (_, i) => frame(i % 2 === 0 ? 1 : 2, Buffer.alloc(64, 97)));
    const out = slowSink();
    const err = slowSink();
    let peakListeners = 0;
    const watch = setInterval(() => {
      peakListeners = Math.max(
        peakListeners,
        out.listenerCount('close') + out.listenerCount('drain'),
        err.listenerCount('close') + err.listenerCount('drain'),
      );
    }, 0);
    await demultiplex(Readable.from(frames), out, err);
    clearInterval(watch);
    peakListeners = Math.max(peakListeners, out.listenerCount('close'), err.listenerCount('close'));
    expect(Buffer.concat(out.received).length).toBe(100 * 64);
    expect(Buffer.concat(err.received).length).toBe(100 * 64);
    // Writable itself keeps at most a couple of its own listeners; one leaked pair per wait would be ~100.
    expect(peakListeners).toBeLessThan(6);
  });

  it('hands every payload on as a view of the engine chunk it came in, never a copy (many chunks buffered)', async () => {
    const chunks = Array.from({ length: 40 }, (_, i) => {
      const chunk = Buffer.alloc(8 + 4096);
      chunk.set(frame(i % 2 === 0 ? 1 : 2, Buffer.alloc(4096, 97 + (i % 26))));
      return chunk;
    });
    const source = new PassThrough({ highWaterMark: 1024 * 1024 });
    for (const chunk of chunks) source.write(chunk); // all buffered before demultiplex reads any
    source.end();
    const out = slowSink();
    const err = slowSink();
    const counts = await demultiplex(source, out, err);
    expect(counts).toEqual({ stdout: 20 * 4096, stderr: 20 * 4096 });
    const engineMemory = new Set(chunks.map((c) => c.buffer));
    const received = [...out.received, ...err.received];
    expect(received.filter((b) => !engineMemory.has(b.buffer as ArrayBuffer)).length).toBe(0);
    const sent = Buffer.concat(chunks.filter((_, i) => i % 2 === 0).map((c) => c.subarray(8)));
    expect(Buffer.concat(out.received).equals(sent)).toBe(true);
  });

  it("rejects with the source's error, and ends both targets", async () => {
    const source = new PassThrough();
    const out = new PassThrough();
    const err = new PassThrough();
    out.resume();
    err.resume();
    const done = demultiplex(source, out, err);
    source.write(frame(1, Buffer.from('partial')));
    setImmediate(() => source.destroy(new Error('connection reset')));
    await expect(done).rejects.toThrow('connection reset');
    expect(out.writableEnded && err.writableEnded).toBe(true);
  });

  it('rejects when the source closes without ending (an engine connection cut)', async () => {
    const source = new PassThrough();
    const out = new PassThrough();
    const err = new PassThrough();
    out.resume();
    err.resume();
    const done = demultiplex(source, out, err);
    source.write(frame(1, Buffer.from('partial')));
    setImmediate(() => source.destroy());
    await expect(done).rejects.toMatchObject({ code: 'ERR_STREAM_PREMATURE_CLOSE' });
    expect(out.writableEnded && err.writableEnded).toBe(true);
  });

  it('destroys the source when a target fails mid-stream', async () => {
    const source = new PassThrough();
    const out = new Writable({
      write(_chunk, _enc, done) {
        done();
      },
    });
    const err = new PassThrough();
    const boom = new Error('sink gone');
    out.write = () => {
      throw boom;
    };
    const done = demultiplex(source, out, err);
    source.write(frame(1, Buffer.from('x')));
    await expect(done).rejects.toBe(boom);
    expect(source.destroyed).toBe(true);
  });
});
