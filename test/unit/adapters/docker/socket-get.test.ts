import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createNetServer, type Server as NetServer } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseResponse, socketGet } from '../../../../src/adapters/docker/socket-get.js';

let dir: string;
let http: Server;
let httpSocket: string;
const servers: NetServer[] = [];

/** A raw server on its own socket that answers each connection with `answer` (then closes, or hangs). */
async function rawServer(name: string, answer: string | null): Promise<string> {
  const path = join(dir, name);
  const server = createNetServer((conn) => {
    conn.once('data', () => {
      if (answer !== null) conn.end(answer);
    });
    conn.on('error', () => undefined);
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(path, resolve));
  return path;
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-socket-get-'));
  httpSocket = join(dir, 'http.sock');
  // Node's own server: a body written in pieces without a length goes out chunked, as Go's does past 4 KiB.
  http = createHttpServer((req, res) => {
    if (req.url === '/chunked') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('[');
      for (let i = 0; i < 500; i += 1) res.write(`${i === 0 ? '' : ','}{"Id":"c${i}","é":"ü"}`);
      res.end(']');
    } else if (req.url === '/sized') {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"message":"no such image"}');
    } else res.writeHead(500).end();
  });
  await new Promise<void>((resolve) => http.listen(httpSocket, resolve));
});
afterAll(async () => {
  await new Promise<void>((resolve) => http.close(() => resolve()));
  for (const s of servers) await new Promise<void>((resolve) => s.close(() => resolve()));
  await rm(dir, { recursive: true, force: true });
});

describe('socketGet (an HTTP/1.1 GET over the engine socket without node:http)', () => {
  it('a chunked answer comes back whole, multi-byte characters included', async () => {
    const { status, body } = await socketGet(httpSocket, '/chunked');
    expect(status).toBe(200);
    const list = JSON.parse(body.toString('utf8')) as { Id: string; é: string }[];
    expect(list).toHaveLength(500);
    expect(list[499]).toEqual({ Id: 'c499', é: 'ü' });
  });

  it('a sized answer of any status is resolved with its body, for the caller to judge', async () => {
    const { status, body } = await socketGet(httpSocket, '/sized');
    expect(status).toBe(404);
    expect(JSON.parse(body.toString('utf8'))).toEqual({ message: 'no such image' });
  });

  it('an answer cut short, or not HTTP at all, rejects instead of resolving a partial body', async () => {
    const short = await rawServer('short.sock', 'HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{"Id":');
    await expect(socketGet(short, '/x')).rejects.toThrow(/cut short \(6 of 50 bytes\)/);
    const chunkCut = await rawServer(
      'chunk.sock',
      'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n[1,2]\r\n',
    );
    await expect(socketGet(chunkCut, '/x')).rejects.toThrow(/chunked answer was cut short/);
    const notHttp = await rawServer('nothttp.sock', 'SSH-2.0-OpenSSH\r\n\r\n');
    await expect(socketGet(notHttp, '/x')).rejects.toThrow(/not an HTTP\/1.x answer/);
    const headless = await rawServer('headless.sock', 'HTTP/1.1 200 OK\r\nContent-Le');
    await expect(socketGet(headless, '/x')).rejects.toThrow(/before the end of its headers/);
  });

  it('no answer within the timeout: ETIMEDOUT; no server at all: the connection error', async () => {
    const silent = await rawServer('silent.sock', null);
    const err = await socketGet(silent, '/x', 100).catch((e: unknown) => e);
    expect((err as { code?: string }).code).toBe('ETIMEDOUT');
    const missing = await socketGet(join(dir, 'none.sock'), '/x').catch((e: unknown) => e);
    expect((missing as { code?: string }).code).toBe('ENOENT');
  });

  it('the request is one GET of the path, with Host and Connection: close', async () => {
    const seen: string[] = [];
    const path = join(dir, 'echo.sock');
    const server = createNetServer((conn) => {
      conn.once('data', (chunk: Buffer) => {
        seen.push(chunk.toString('latin1'));
        conn.end('HTTP/1.1 204 No Content\r\n\r\n');
      });
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(path, resolve));
    const answer = await socketGet(path, '/containers/json?all=1&filters=%7B%7D');
    expect(answer.status).toBe(204);
    expect(answer.body.length).toBe(0);
    expect(seen).toEqual([
      'GET /containers/json?all=1&filters=%7B%7D HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n',
    ]);
  });
});

describe('parseResponse', () => {
  it('chunk extensions and trailers are read past; a bad chunk size is refused', () => {
    const raw = Buffer.from(
      'HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n',
    );
    expect(parseResponse(raw).body.toString()).toBe('abc0123456789');
    expect(() =>
      parseResponse(Buffer.from('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n')),
    ).toThrow(/bad chunk size/);
  });

  it('without a length or chunks the body runs to the close; extra bytes past Content-Length are not body', () => {
    expect(parseResponse(Buffer.from('HTTP/1.0 200 OK\r\n\r\n{"a":1}')).body.toString()).toBe('{"a":1}');
    expect(
      parseResponse(Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}junk')).body.toString(),
    ).toBe('{}');
  });
});
