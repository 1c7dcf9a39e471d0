import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { ApiError } from '../../app/serve/api-error.js';
import type { PairService } from '../../app/serve/pair-service.js';
import { sendJson, type Router } from './http-kit.js';
import { readJson } from './json-body.js';

const FOLLOW_POLL_MS = 200;
const CHUNK_BYTES = 64 * 1024;

/** /v1/pairs…: start (202), status, logs (already redacted on disk; followed while the pair runs), stop. */
export function registerPairRoutes(router: Router, pairs: PairService): void {
  router.add('POST', '/v1/pairs', async ({ req, res }) => {
    sendJson(res, 202, await pairs.start(await readJson(req)));
  });

  router.add('GET', '/v1/pairs/{id}', async ({ res, params }) => {
    sendJson(res, 200, await pairs.status(params['id'] ?? ''));
  });

  router.add('DELETE', '/v1/pairs/{id}', async ({ res, params }) => {
    sendJson(res, 200, await pairs.stop(params['id'] ?? ''));
  });

  router.add('GET', '/v1/pairs/{id}/logs', async ({ res, params, query, clientGone }) => {
    const id = params['id'] ?? '';
    const stream = query.get('stream') ?? 'stdout';
    if (stream !== 'stdout' && stream !== 'stderr')
      throw ApiError.invalid('the logs request', [{ path: 'stream', rule: 'must be "stdout" or "stderr"' }]);
    await pairs.status(id); // 404 for an unknown pair
    const follow = query.get('follow') === '1';
    const path = join(pairs.outputOf(id), `${stream}.log`);
    res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
    let position = 0;
    const buffer = Buffer.alloc(CHUNK_BYTES);
    for (;;) {
      const running = pairs.isRunning(id);
      const file = await open(path, 'r').catch(() => null);
      if (file !== null) {
        try {
          for (;;) {
            const { bytesRead } = await file.read(buffer, 0, CHUNK_BYTES, position);
            if (bytesRead === 0) break;
            position += bytesRead;
            if (!res.write(buffer.subarray(0, bytesRead)))
              await new Promise((resolve) => res.once('drain', resolve));
          }
        } finally {
          await file.close();
        }
      }
      // One last read after the pair has finished, so nothing written at its end is missed.
      if (!follow || !running || clientGone.aborted) break;
      await new Promise((resolve) => setTimeout(resolve, FOLLOW_POLL_MS));
    }
    res.end();
  });
}
