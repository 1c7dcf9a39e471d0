/**
 * An exec's answer written in pieces (issue 39: 16 MiB of control bytes is 96 MB of JSON, which serialized at once held
 * serve 1.2 s): the client reads exactly JSON.stringify's text, whatever the strings hold; a short answer goes out
 * whole with its length; a client gone stops the writing. Over a real HTTP server on a Unix socket.
 */
import { createServer, request, type Server } from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sendLargeJson } from '../../../../src/adapters/http/http-kit.js';
import { ExecSchema } from '../../../../src/app/serve/exec-schemas.js';
import { seededRandom } from '../../../support/seeded-random.js';

let dir: string;
let server: Server;
let socketPath: string;
let answer: Record<string, unknown> = {};
let finished: Promise<void> = Promise.resolve();

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-large-json-'));
  socketPath = join(dir, 'api.sock');
  server = createServer((_req, res) => {
    finished = sendLargeJson(res, 200, answer);
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  await rm(dir, { recursive: true, force: true });
});

function get(): Promise<{ headers: Record<string, unknown>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path: '/', method: 'GET' }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

/** A string of `length` characters drawn from controls, quotes, backslashes, astral pairs and plain text. */
function textOf(next: () => number, length: number): string {
  const pieces = ['\u0001', '\u001f', '"', '\\', '\n', '😀', 'é', 'a', '\u2028', '\ud800'];
  let out = '';
  while (out.length < length) out += pieces[Math.floor(next() * pieces.length)] ?? 'a';
  return out;
}

describe('sendLargeJson', () => {
  it("writes exactly JSON.stringify's text for long strings of every kind, cut anywhere", async () => {
    for (const seed of [1, 2, 3]) {
      const next = seededRandom(seed);
      answer = {
        stdout: textOf(next, 600_000 + Math.floor(next() * 1000)),
        stderr: textOf(next, 300_000),
        return_code: 0,
        skipped: undefined,
        nested: { a: [1, 'two'] },
        truncated: false,
      };
      const got = await get();
      await finished;
      expect(got.body).toBe(JSON.stringify(answer));
      expect(got.headers['transfer-encoding']).toBe('chunked');
      expect(JSON.parse(got.body)).toEqual(JSON.parse(JSON.stringify(answer)));
    }
  });

  it('sends a short answer whole, with its length', async () => {
    answer = { stdout: 'hi\n', stderr: '', return_code: 0 };
    const got = await get();
    expect(got.body).toBe('{"stdout":"hi\\n","stderr":"","return_code":0}');
    expect(got.headers['content-length']).toBe(String(Buffer.byteLength(got.body)));
  });

  it('stops writing once the client is gone', async () => {
    answer = { stdout: '\u0001'.repeat(8 * 1024 * 1024) };
    await new Promise<void>((resolve) => {
      const req = request({ socketPath, path: '/', method: 'GET' }, (res) => {
        res.once('data', () => {
          req.destroy();
          resolve();
        });
      });
      req.on('error', () => undefined);
      req.end();
    });
    await finished; // settles: the writing ended with the connection
  });
});

describe('stdin_base64', () => {
  const parse = (stdin_base64: string): boolean =>
    ExecSchema.safeParse({ argv: ['cat'], stdin_base64 }).success;

  it('takes standard base64 and nothing else', () => {
    expect(['', 'YQ==', 'YWI=', 'YWJj', Buffer.alloc(3000, 7).toString('base64')].map(parse)).toEqual([
      true,
      true,
      true,
      true,
      true,
    ]);
    expect(['YQ', 'YQ=', 'Y===', '====', 'YW=j', 'YW J', 'YWJj\n', 'YW-_'].map(parse)).toEqual(
      Array(8).fill(false),
    );
  });
});
