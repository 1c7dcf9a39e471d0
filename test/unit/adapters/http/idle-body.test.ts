/**
 * A streamed upload that pauses too long ends in 408 (issue 39: a Content-Length larger than what was sent held the
 * transfer's slot for Node's 300 s), but the time the server itself holds the body back does not count.
 */
import type { IncomingMessage } from 'node:http';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { idleLimitedBody } from '../../../../src/adapters/http/idle-body.js';
import { ApiError } from '../../../../src/app/serve/api-error.js';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function request(): PassThrough & IncomingMessage {
  return new PassThrough() as PassThrough & IncomingMessage;
}

describe('idleLimitedBody', () => {
  it('ends in 408 when no byte comes for the limit', async () => {
    const req = request();
    const { body, timedOut } = idleLimitedBody(req, 100);
    const failed = new Promise<unknown>((resolve) => body.on('error', resolve));
    body.resume();
    req.write('first bytes');
    const err = await failed;
    expect(timedOut()).toBe(true);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(408);
    expect((err as ApiError).code).toBe('E_BODY_TIMEOUT');
  });

  it('passes a body whose pauses stay under the limit, whole', async () => {
    const req = request();
    const { body, timedOut } = idleLimitedBody(req, 600);
    const chunks: Buffer[] = [];
    body.on('data', (chunk: Buffer) => chunks.push(chunk));
    const ended = new Promise((resolve) => body.on('end', resolve));
    for (let i = 0; i < 5; i++) {
      req.write(`piece-${i};`);
      await sleep(40);
    }
    req.end();
    await ended;
    expect(Buffer.concat(chunks).toString()).toBe('piece-0;piece-1;piece-2;piece-3;piece-4;');
    expect(timedOut()).toBe(false);
  });

  it('does not count the time the server holds the body back (a reader that does not read)', async () => {
    const req = request();
    const { body, timedOut } = idleLimitedBody(req, 100);
    // 1 MiB while nobody reads: the body fills, the request is paused.
    req.write(Buffer.alloc(1024 * 1024, 1));
    req.end();
    await sleep(350);
    expect(timedOut()).toBe(false);
    let bytes = 0;
    body.on('data', (chunk: Buffer) => (bytes += chunk.length));
    await new Promise((resolve) => body.on('end', resolve));
    expect(bytes).toBe(1024 * 1024);
    expect(timedOut()).toBe(false);
  });

  it('hands the request back: released, nothing more is read from it and no timeout comes', async () => {
    const req = request();
    const { body, timedOut, release } = idleLimitedBody(req, 80);
    body.resume();
    release();
    await sleep(200);
    expect(timedOut()).toBe(false);
    expect(req.listenerCount('data')).toBe(0);
  });

  it('a request that fails before anyone reads the body is no unhandled error, and says it broke', async () => {
    const req = request();
    const { body, broken, timedOut } = idleLimitedBody(req, 1000);
    req.destroy(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }));
    await sleep(20);
    expect(broken()).toBe(true);
    expect(timedOut()).toBe(false);
    expect(body.destroyed).toBe(true);
  });
});
