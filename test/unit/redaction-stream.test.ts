import { Readable, Writable } from 'node:stream';
import type { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from 'vitest';
import { createRedactStream } from '../../src/adapters/redact-stream.js';
import type { IdleScheduler } from '../../src/adapters/redact-stream.js';
import { compileRedaction } from '../../src/core/redaction/compile.js';
import { StreamRedactor } from '../../src/core/redaction/stream-redactor.js';
import {
  ALNUM,
  leakedWindows,
  pemBlock,
  randomKeyBody,
  randomString,
  seededRandom,
} from './redaction.fixtures.js';

const random = seededRandom(99);
const SECRET = 'hunter2-' + randomString(random, ALNUM, 24);

async function through(stream: Transform, chunks: readonly Buffer[]): Promise<Buffer[]> {
  const out: Buffer[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      out.push(chunk);
      callback();
    },
  });
  await pipeline(Readable.from(chunks), stream, sink);
  return out;
}

function randomBuffers(bytes: Buffer, maxChunk: number): Buffer[] {
  const chunks: Buffer[] = [];
  for (let i = 0; i < bytes.length;) {
    const size = 1 + Math.floor(random() * maxChunk);
    chunks.push(bytes.subarray(i, i + size));
    i += size;
  }
  return chunks;
}

function randomBytes(length: number): Buffer {
  const bytes = Buffer.alloc(length);
  for (let i = 0; i < length; i++) bytes[i] = Math.floor(random() * 256);
  return bytes;
}

describe('createRedactStream: bytes that are no secret', () => {
  it('passes random binary data through byte-identical', async () => {
    const input = randomBytes(256 * 1024);
    const out = await through(
      createRedactStream([SECRET, 'another-secret-value']),
      randomBuffers(input, 9000),
    );
    expect(Buffer.concat(out).equals(input)).toBe(true);
  });

  it('passes UTF-8 text split inside multi-byte chars through byte-identical', async () => {
    const input = Buffer.from('Grüße, 日本語のテキスト 🎉🔑 ñandú — '.repeat(200), 'utf8');
    const splits = [1, 2, 3, 5, 7];
    for (const size of splits) {
      const chunks = Array.from({ length: Math.ceil(input.length / size) }, (_, i) =>
        input.subarray(i * size, (i + 1) * size),
      );
      const out = await through(createRedactStream([SECRET, 'pässwörd-🔑-1234']), chunks);
      expect(Buffer.concat(out).equals(input)).toBe(true);
    }
  });

  it('hands a clean chunk on as the same Buffer', async () => {
    const chunks = [Buffer.from('line one\n'), Buffer.from('line two\n')];
    const out = await through(createRedactStream([SECRET]), chunks);
    expect(out[0]).toBe(chunks[0]);
    expect(out[1]).toBe(chunks[1]);
  });

  it('masks a UTF-8 secret split inside a multi-byte char', async () => {
    const secret = 'pässwörd-🔑-1234';
    const input = Buffer.from(`before ${secret} after\n`, 'utf8');
    for (let cut = 1; cut < input.length; cut++) {
      const out = await through(createRedactStream([secret]), [input.subarray(0, cut), input.subarray(cut)]);
      expect(Buffer.concat(out).toString('utf8')).toBe('before [REDACTED] after\n');
    }
  });
});

class FakeScheduler {
  pending: (() => void) | null = null;
  delays: number[] = [];
  readonly schedule: IdleScheduler = (callback, delayMs) => {
    this.pending = callback;
    this.delays.push(delayMs);
    return () => {
      if (this.pending === callback) this.pending = null;
    };
  };
  fire(): void {
    const callback = this.pending;
    this.pending = null;
    callback?.();
  }
}

async function write(stream: Transform, text: string): Promise<string> {
  await new Promise<void>((resolve, reject) =>
    stream.write(Buffer.from(text, 'latin1'), (error) => (error ? reject(error) : resolve())),
  );
  return drain(stream);
}

function drain(stream: Transform): string {
  let out = '';
  for (let chunk: unknown = stream.read(); chunk !== null; chunk = stream.read())
    out += (chunk as Buffer).toString('latin1');
  return out;
}

describe('createRedactStream: idle flush', () => {
  it('keeps a pending secret prefix held at idle and masks it once complete', async () => {
    const timer = new FakeScheduler();
    const stream = createRedactStream([SECRET], { idleFlushMs: 25, idleScheduler: timer.schedule });
    expect(await write(stream, `ready\nvalue=${SECRET.slice(0, 12)}`)).toBe('ready\nvalue=');
    expect(timer.delays).toEqual([25]);
    timer.fire();
    expect(drain(stream)).toBe('');
    expect(await write(stream, `${SECRET.slice(12)} done\n`)).toBe('[REDACTED] done\n');
    stream.end();
  });

  it('emits a qualifying open-ended token masked at idle and drops its continuation', async () => {
    const timer = new FakeScheduler();
    const stream = createRedactStream([], { idleFlushMs: 25, idleScheduler: timer.schedule });
    const token = 'sk-proj-' + randomKeyBody(random, ALNUM, 40);
    expect(await write(stream, `key ${token}`)).toBe('key ');
    timer.fire();
    expect(drain(stream)).toBe('[REDACTED:openai]');
    expect(await write(stream, 'MoreTokenChars123 rest\n')).toBe(' rest\n');
    stream.end();
  });

  it('emits an open Authorization value masked at idle, dropping the rest of the line', async () => {
    const timer = new FakeScheduler();
    const stream = createRedactStream([], { idleFlushMs: 25, idleScheduler: timer.schedule });
    expect(await write(stream, 'GET /\nAuthorization: Basic dXNl')).toBe('GET /\n');
    timer.fire();
    expect(drain(stream)).toBe('Authorization: [REDACTED:authorization]');
    expect(await write(stream, 'cjpwYXNz\nHost: x\n')).toBe('\nHost: x\n');
    stream.end();
  });

  it('drops an open PEM block after idle until its END line, then resumes', async () => {
    const timer = new FakeScheduler();
    const stream = createRedactStream([], { idleScheduler: timer.schedule });
    const [header, ...rest] = pemBlock(random, 'EC PRIVATE KEY', 4).split('\n');
    expect(await write(stream, `log\n${header}\n${rest[0]}`)).toBe('log\n');
    timer.fire();
    expect(drain(stream)).toBe('[REDACTED:private_key]');
    expect(await write(stream, `\n${rest.slice(1).join('\n')}`)).toBe('');
    expect(await write(stream, '\nback to normal sk-\n')).toBe('\nback to normal sk-\n');
    stream.end();
  });

  it('arms no timer while nothing is held back', async () => {
    const timer = new FakeScheduler();
    const stream = createRedactStream([SECRET], { idleScheduler: timer.schedule });
    expect(await write(stream, 'plain line\n')).toBe('plain line\n');
    expect(timer.delays).toEqual([]);
    stream.end();
  });

  it('flushes held text at stream end: a prefix under 4 bytes as is, a secret prefix of 4+ bytes masked', async () => {
    const short = await through(createRedactStream([SECRET]), [Buffer.from(`x ${SECRET.slice(0, 3)}`)]);
    expect(Buffer.concat(short).toString()).toBe(`x ${SECRET.slice(0, 3)}`);
    const four = await through(createRedactStream([SECRET]), [Buffer.from(`x ${SECRET.slice(0, 4)}`)]);
    expect(Buffer.concat(four).toString()).toBe('x [REDACTED]');
    const long = await through(createRedactStream([SECRET]), [Buffer.from(`x ${SECRET.slice(0, 12)}`)]);
    expect(Buffer.concat(long).toString()).toBe('x [REDACTED]');
  });
});

describe('bounded memory', () => {
  it('masks a PEM block longer than the cap without holding it, and resumes after END', () => {
    const compiled = compileRedaction([], 'latin1-bytes', { maxHeldChars: 4096 });
    const redactor = new StreamRedactor(compiled);
    const block = pemBlock(random, 'RSA PRIVATE KEY', 400);
    const text = `start\n${block}\nafter the key\n`;
    let out = '';
    let maxHeld = 0;
    for (let i = 0; i < text.length; i += 100) {
      out += redactor.push(text.slice(i, i + 100));
      maxHeld = Math.max(maxHeld, redactor.pendingLength);
    }
    out += redactor.end();
    expect(out).toBe('start\n[REDACTED:private_key]\nafter the key\n');
    expect(maxHeld).toBeLessThanOrEqual(4096 + 100);
    expect(leakedWindows(out, block.split('\n').slice(1, -1))).toEqual([]);
  });

  it('masks an endless token once it outgrows the cap', () => {
    const redactor = new StreamRedactor(compileRedaction([], 'latin1-bytes', { maxHeldChars: 2048 }));
    let out = redactor.push('t=sk-Q7');
    for (let i = 0; i < 100; i++) out += redactor.push(randomString(random, ALNUM, 100));
    expect(redactor.pendingLength).toBe(0);
    out += redactor.push(' next\n') + redactor.end();
    expect(out).toBe('t=[REDACTED:openai] next\n');
  });
});

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('createRedactStream: batching and backpressure', () => {
  it('scans a burst of 1-byte writes as one batch, masking a secret spread over them', async () => {
    const stream = createRedactStream([SECRET]);
    const outputs: Buffer[] = [];
    stream.on('data', (chunk: Buffer) => outputs.push(chunk));
    const text = `a ${SECRET} b\n`.repeat(3);
    const acks = [...text].map(
      (ch) => new Promise<void>((resolve) => stream.write(Buffer.from(ch, 'latin1'), () => resolve())),
    );
    await Promise.all(acks);
    expect(Buffer.concat(outputs).toString('latin1')).toBe('a [REDACTED] b\n'.repeat(3));
    expect(outputs.length).toBeLessThanOrEqual(3);
    stream.end();
  });

  it('signals backpressure and holds write acknowledgements while nobody reads', async () => {
    const stream = createRedactStream([]);
    const chunk = Buffer.alloc(1024, 0x61);
    let writes = 0;
    let acked = 0;
    for (let accepted = true; accepted && writes < 1000; writes++)
      accepted = stream.write(chunk, () => acked++);
    for (let turn = 0; turn < 5; turn++) await nextTurn();
    expect(writes).toBeLessThan(1000);
    expect(acked).toBeLessThan(writes);
    expect(stream.readableLength).toBeLessThanOrEqual(2 * 64 * 1024);
    let readBytes = 0;
    for (let turn = 0; turn < 1000 && acked < writes; turn++) {
      for (let out: unknown = stream.read(); out !== null; out = stream.read())
        readBytes += (out as Buffer).length;
      await nextTurn();
    }
    for (let out: unknown = stream.read(); out !== null; out = stream.read())
      readBytes += (out as Buffer).length;
    expect(acked).toBe(writes);
    expect(readBytes).toBe(writes * chunk.length);
    stream.end();
  });
});
