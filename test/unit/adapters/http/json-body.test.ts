import { createServer, type Server } from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { sendError, sendJson } from '../../../../src/adapters/http/http-kit.js';
import { JsonShapeScanner, readJson } from '../../../../src/adapters/http/json-body.js';
import { silentLogger } from '../../../../src/app/ports/logger.js';
import { toApiError } from '../../../../src/app/serve/api-error.js';
import { EngineError } from '../../../../src/app/ports/engine-error.js';
import { rawRequest } from '../../../support/raw-http.js';

const LIMITS = { maxBytes: 64 * 1024, maxDepth: 8, maxValues: 100, idleTimeoutMs: 300 };

describe('JsonShapeScanner', () => {
  it('counts depth and values outside strings only, across pieces', () => {
    const scanner = new JsonShapeScanner({ maxDepth: 3, maxValues: 10 });
    expect(scanner.feed(Buffer.from('{"a":"[[[[[,,,,,,,,,,,\\\\"'))).toBeNull();
    expect(scanner.feed(Buffer.from(',"b":[[1,'))).toBeNull();
    expect(scanner.feed(Buffer.from('['))).toContain('more than 3 deep');
    const many = new JsonShapeScanner({ maxDepth: 3, maxValues: 10 });
    expect(many.feed(Buffer.from(`[${'1,'.repeat(20)}1]`))).toContain('at most 10 values');
  });
});

describe('readJson on a real socket', () => {
  let dir: string;
  let server: Server;
  let socketPath: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-json-body-'));
    socketPath = join(dir, 's.sock');
    server = createServer((req, res) => {
      readJson(req, LIMITS).then(
        (value) => sendJson(res, 200, value),
        (err: unknown) => sendError(res, err, silentLogger, req),
      );
    });
    await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  });
  afterEach(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await rm(dir, { recursive: true, force: true });
  });
  const head = (length: number, type = 'application/json'): string =>
    `POST / HTTP/1.1\r\nHost: x\r\nContent-Type: ${type}\r\nContent-Length: ${length}`;

  it('a body over the limit, sent whole before reading: 413, Connection: close, and no reset', async () => {
    const body = Buffer.alloc(1024 * 1024, 0x31);
    const answer = await rawRequest(socketPath, head(body.length), body);
    expect(answer).toMatchObject({ status: 413, socketError: null });
    expect(answer.headers['connection']).toBe('close');
  });

  it('too deep, too many values, not UTF-8, not JSON: 400 naming the rule; wrong type 415; a stalled body 408', async () => {
    const deep = Buffer.from('['.repeat(20));
    expect((await rawRequest(socketPath, head(deep.length), deep)).status).toBe(400);
    const many = Buffer.from(`[${'1,'.repeat(200)}1]`);
    expect((await rawRequest(socketPath, head(many.length), many)).body).toContain('at most 100 values');
    const latin = Buffer.from([0x22, 0xe9, 0x22]);
    expect((await rawRequest(socketPath, head(3), latin)).body).toContain('must be UTF-8');
    expect((await rawRequest(socketPath, head(3, 'text/plain'), '{}\n')).status).toBe(415);
    const stalled = await rawRequest(socketPath, head(100), '{"a":');
    expect(stalled.status).toBe(408);
    expect(stalled.headers['connection']).toBe('close');
    expect((await rawRequest(socketPath, head(9), '{"a":[1]}')).body).toBe('{"a":[1]}');
  });
});

describe('engine errors as the API reports them', () => {
  it('an engine 400 is our own 400, never the engine text; a 500 keeps no host path', () => {
    const overlay = '/var/lib/docker/overlay2/3f2a/merged/a\u0000b';
    const refused = toApiError(
      new EngineError(
        'engine_error',
        `Docker engine error while trying to create a container: invalid ${overlay}`,
        {
          statusCode: 400,
          engineMessage: `invalid ${overlay}`,
        },
      ),
    );
    expect(refused).toMatchObject({ status: 400, code: 'E_ENGINE_REFUSED' });
    expect(refused.message).toBe('the Docker engine refused the request as invalid (create a container)');
    const failed = toApiError(
      new EngineError(
        'engine_error',
        `Docker engine error while trying to start a container: mkdir ${overlay}: x`,
        {
          statusCode: 500,
          engineMessage: `mkdir ${overlay}: x`,
        },
      ),
    );
    expect(failed.status).toBe(500);
    expect(failed.message).not.toContain('/var/lib/docker');
    expect(failed.message).toContain('<path>');
  });
});
