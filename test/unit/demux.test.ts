import { PassThrough, Readable, Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { demultiplex } from '../../src/adapters/docker/demux.js';

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
});
