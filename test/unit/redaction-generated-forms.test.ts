/**
 * Generator-based leak test (issue 11): every form of every secret, written independently of the
 * production encoders with Buffer/JSON/URL APIs, at every split position and in chunks of 1, 7 and
 * 4096 bytes, through every path a pair's bytes take to disk or to our output: the stream
 * redactor (stdout/stderr), the one-shot redactor (messages), session files (contents and names,
 * through the real safe extractor) and the parsed outcome. Every output byte is scanned.
 */
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pack } from 'tar-stream';
import { afterAll, describe, expect, it } from 'vitest';
import { redactOutcome, redactText } from '../../src/core/redaction/redact-text.js';
import { createRedactStream } from '../../src/adapters/redact-stream.js';
import { extractArchiveSafely } from '../../src/adapters/safe-extract.js';
import { compileRedaction } from '../../src/core/redaction/compile.js';
import { StreamRedactor } from '../../src/core/redaction/stream-redactor.js';
import { stableBase64 } from './redaction.fixtures.js';

const SECRETS = ['sk-live-Q7vJx2mB9kLp4RtY', 'p@ss w/rd+"<&>\\é~!*()\'x', 'Tr0ub4dor&3-日本🎉'];

interface Case {
  readonly name: string;
  /** The bytes as written (latin1: one char per byte). */
  readonly bytes: string;
  /** Strings that encode the secret and must not survive (latin1). */
  readonly needles: readonly string[];
  /** Line breaks inside the encoding: scan the output with them removed too. */
  readonly wrapped?: boolean;
}

const latin1 = (b: Buffer) => b.toString('latin1');
const utf8 = (s: string) => Buffer.from(s, 'utf8');

function percentEveryByte(s: string, upper: boolean): string {
  return [...utf8(s)]
    .map((b) => `%${b.toString(16).padStart(2, '0')[upper ? 'toUpperCase' : 'toLowerCase']()}`)
    .join('');
}

function jsonAllEscaped(s: string, upper: boolean): string {
  let out = '';
  for (let i = 0; i < s.length; i++) {
    const hex = s.charCodeAt(i).toString(16).padStart(4, '0');
    out += `\\u${upper ? hex.toUpperCase() : hex}`;
  }
  return out;
}

function wrap(text: string, width: number, eol: string): string {
  const lines: string[] = [];
  for (let i = 0; i < text.length; i += width) lines.push(text.slice(i, i + width));
  return lines.join(eol);
}

function casesFor(secret: string): Case[] {
  const raw = latin1(utf8(secret));
  const cases: Case[] = [{ name: 'raw', bytes: `pre ${raw} post`, needles: [raw] }];
  for (const k of [0, 1, 2]) {
    const inner = stableBase64(secret, k);
    const urlInner = inner.replace(/\+/g, '-').replace(/\//g, '_');
    const payload = Buffer.concat([Buffer.from('xyz').subarray(0, k), utf8(secret), Buffer.from('!')]);
    const std = payload.toString('base64');
    const url = payload.toString('base64url');
    cases.push(
      { name: `base64 std padded align ${k}`, bytes: `b64=${std} end`, needles: [inner] },
      { name: `base64 std unpadded align ${k}`, bytes: `b64=${std.replace(/=+$/, '')}`, needles: [inner] },
      { name: `base64url unpadded align ${k}`, bytes: `u=${url}&x=1`, needles: [urlInner] },
      {
        name: `base64url padded align ${k}`,
        bytes: `u=${url}${'='.repeat((4 - (url.length % 4)) % 4)};`,
        needles: [urlInner],
      },
    );
  }
  // MIME: the break falls at every offset inside the encoding as the lead-in grows.
  for (const width of [64, 76]) {
    for (const eol of ['\n', '\r\n']) {
      for (let lead = 0; lead < 60; lead += 1) {
        const payload = Buffer.concat([Buffer.alloc(lead, 0x41), utf8(secret), Buffer.from('tail')]);
        const encoded = payload.toString('base64');
        const k = lead % 3;
        cases.push({
          name: `base64 MIME ${width} ${JSON.stringify(eol)} lead ${lead}`,
          bytes: `Content: x\n\n${wrap(encoded, width, eol)}${eol}`,
          needles: [stableBase64(secret, k)],
          wrapped: true,
        });
      }
    }
  }
  const hex = utf8(secret).toString('hex');
  cases.push(
    { name: 'hex lower', bytes: `h=${hex}.`, needles: [hex] },
    { name: 'hex upper', bytes: `h=${hex.toUpperCase()}.`, needles: [hex.toUpperCase()] },
  );
  const every = percentEveryByte(secret, true);
  const everyLower = percentEveryByte(secret, false);
  const uri = encodeURIComponent(secret);
  const form = new URLSearchParams({ k: secret }).toString().slice(2);
  cases.push(
    { name: 'percent every byte upper', bytes: `q=${every}&`, needles: [every] },
    { name: 'percent every byte lower', bytes: `q=${everyLower}&`, needles: [everyLower] },
    { name: 'encodeURIComponent', bytes: `q=${uri}&`, needles: [uri] },
    { name: 'form encoding (+ for space)', bytes: `q=${form}&`, needles: [form] },
  );
  const json = JSON.stringify(secret).slice(1, -1);
  const jsonBytes = latin1(utf8(json));
  const lower = jsonAllEscaped(secret, false);
  const upper = jsonAllEscaped(secret, true);
  const htmlSafe = latin1(
    utf8(json.replace(/</g, '\\u003c').replace(/>/g, '\\u003e').replace(/&/g, '\\u0026')),
  );
  const slashes = latin1(utf8(json.replace(/\//g, '\\/')));
  cases.push(
    { name: 'JSON string', bytes: `{"k":"${jsonBytes}"}`, needles: [jsonBytes] },
    { name: 'JSON \\u lower', bytes: `{"k":"${lower}"}`, needles: [lower] },
    { name: 'JSON \\u upper', bytes: `{"k":"${upper}"}`, needles: [upper] },
    { name: 'JSON HTML-safe (Go)', bytes: `{"k":"${htmlSafe}"}`, needles: [htmlSafe] },
    { name: 'JSON \\/', bytes: `{"k":"${slashes}"}`, needles: [slashes] },
  );
  const le = Buffer.from(secret, 'utf16le');
  const be = Buffer.from(le).swap16();
  cases.push(
    {
      name: 'UTF-16LE',
      bytes: latin1(Buffer.concat([Buffer.from('a\0=\0'), le, Buffer.from('\n\0')])),
      needles: [latin1(le)],
    },
    {
      name: 'UTF-16BE',
      bytes: latin1(Buffer.concat([Buffer.from('\0a\0='), be, Buffer.from('\0\n')])),
      needles: [latin1(be)],
    },
  );
  return cases;
}

/** Every 8-byte window of each needle (the whole needle when shorter) found in `output`. */
function leaks(output: string, c: Case): string[] {
  const scanned = c.wrapped ? [output, output.replace(/\r?\n/g, '')] : [output];
  const found: string[] = [];
  for (const needle of c.needles) {
    const width = Math.min(8, needle.length);
    for (let i = 0; i + width <= needle.length; i++) {
      const window = needle.slice(i, i + width);
      if (scanned.some((o) => o.includes(window))) found.push(window);
    }
  }
  return found;
}

function chunked(text: string, size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

function run(redactor: StreamRedactor, chunks: readonly string[]): string {
  let out = '';
  for (const chunk of chunks) out += redactor.push(chunk);
  return out + redactor.end();
}

const stats = { cases: 0, runs: 0, bytesScanned: 0, windows: 0 };
const scratch: string[] = [];
afterAll(async () => {
  await Promise.all(scratch.map((d) => rm(d, { recursive: true, force: true })));
  console.log(
    `generated forms: ${stats.cases} cases, ${stats.runs} redactions, ${stats.bytesScanned} output bytes scanned`,
  );
});

describe('secrets next to each other and overlapping', () => {
  const a = 'alpha-Q7vJx2mB';
  const b = 'beta-9kLp4RtY';
  const bridge = `${a.slice(6)}${b.slice(0, 5)}`;
  it.each([
    ['touching: two masks', [a, b], `<${a}${b}>`, '<[REDACTED][REDACTED]>'],
    ['overlapping: one mask', [a, b, bridge], `<${a}${b.slice(0, 5)}>`, '<[REDACTED]>'],
    [
      'touching forms of different kinds',
      [a, b],
      `<${a}${Buffer.from(b).toString('hex')}>`,
      '<[REDACTED][REDACTED]>',
    ],
  ])('%s, whatever the chunking', (_name, secrets, text, expected) => {
    const compiled = compileRedaction(secrets, 'latin1-bytes');
    for (let split = 0; split <= text.length; split++) {
      for (const size of [1, 7, 4096]) {
        expect(
          run(new StreamRedactor(compiled), [
            ...chunked(text.slice(0, split), size),
            ...chunked(text.slice(split), size),
          ]),
        ).toBe(expected);
      }
    }
  });
});

describe.each(SECRETS.map((s) => [s]))('every form of %j', (secret) => {
  const compiled = compileRedaction([secret], 'latin1-bytes');
  const cases = casesFor(secret);

  it.each(cases.map((c) => [c.name, c]))(
    '%s: masked at every split position, chunks of 1, 7 and 4096',
    (_name, c) => {
      stats.cases++;
      const text = c.bytes;
      const outputs: string[] = [run(new StreamRedactor(compiled), chunked(text, 1))];
      for (let split = 0; split <= text.length; split++) {
        for (const size of [7, 4096]) {
          outputs.push(
            run(new StreamRedactor(compiled), [
              ...chunked(text.slice(0, split), size),
              ...chunked(text.slice(split), size),
            ]),
          );
        }
      }
      // Deterministic: the same bytes out however the input was chunked (reattach relies on it).
      expect(new Set(outputs).size, c.name).toBe(1);
      for (const output of outputs) {
        stats.runs++;
        stats.bytesScanned += output.length;
        expect(leaks(output, c), `${c.name}: ${JSON.stringify(output)}`).toEqual([]);
      }
    },
  );

  it.each(cases.map((c) => [c.name, c]))(
    '%s: masked one-shot (messages, file names, outcome strings)',
    (_name, c) => {
      const text = Buffer.from(c.bytes, 'latin1').toString('utf8');
      if (Buffer.from(text, 'utf8').toString('latin1') !== c.bytes) return; // not UTF-8: cannot be a JS string as is
      const once = redactText(text, [secret]);
      const outcome = JSON.stringify(
        redactOutcome({ arms: { [text]: text, list: [text] } }, [secret]).outcome,
      );
      for (const output of [once, outcome]) {
        stats.bytesScanned += output.length;
        expect(leaks(latin1(utf8(output)), c)).toEqual([]);
      }
    },
  );

  it('stdout/stderr stream (createRedactStream) and session files (contents and names) through the safe extractor', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'rg-forms-'));
    scratch.push(dir);
    const archive = pack();
    const nameable = cases.filter((c) => !c.bytes.includes('\0') && !c.bytes.includes('/') && !c.wrapped);
    for (const [i, c] of cases.entries())
      archive.entry({ name: `sessions/f${i}.jsonl` }, Buffer.from(c.bytes, 'latin1'));
    for (const [i, c] of nameable.entries()) {
      const name = Buffer.from(c.bytes, 'latin1')
        .toString('utf8')
        .replace(/[\r\n]/g, '');
      archive.entry({ name: `sessions/n${i}-${name}` }, 'x');
    }
    archive.finalize();
    // tar-stream's Pack is a Node readable at run time; its typings lack isPaused/unpipe/wrap.
    const report = await extractArchiveSafely(archive as unknown as NodeJS.ReadableStream, dir, {
      transform: () => createRedactStream([secret]),
      redactName: (name) => redactText(name, [secret]),
    });
    expect(report.files).toBeGreaterThan(cases.length);
    const names = await readdir(dir);
    const joinedNames = latin1(utf8(names.join('\n')));
    const refusals = latin1(utf8(report.refusals.join('\n')));
    for (const c of nameable) expect(leaks(joinedNames + refusals, c)).toEqual([]);
    for (const [i, c] of cases.entries()) {
      const content = latin1(await readFile(join(dir, `f${i}.jsonl`)));
      stats.bytesScanned += content.length;
      expect(leaks(content, c), c.name).toEqual([]);
    }
    // The stream path itself in 7-byte writes, as stdout and stderr are written.
    for (const c of cases) {
      const parts: Buffer[] = [];
      const stream = createRedactStream([secret], { idleFlushMs: 0 });
      stream.on('data', (b: Buffer) => parts.push(b));
      const done = new Promise((resolve) => stream.on('end', resolve));
      Readable.from(chunked(c.bytes, 7).map((s) => Buffer.from(s, 'latin1'))).pipe(stream);
      await done;
      const output = latin1(Buffer.concat(parts));
      stats.bytesScanned += output.length;
      expect(leaks(output, c), c.name).toEqual([]);
    }
  });
});
