import { once } from 'node:events';
import type { ServerResponse } from 'node:http';
import type { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ApiError, parseBody, toApiError } from '../../app/serve/api-error.js';
import { ExecSchema, SessionCreateSchema } from '../../app/serve/schemas.js';
import type { SessionEngine } from '../../app/serve/session-engine.js';
import type { ExecObserver, SessionManager } from '../../app/serve/session-manager.js';
import type { Logger } from '../../app/ports/logger.js';
import { checkUpload, openChecked, redactedDownload } from '../serve-archive.js';
import { readJson, sendJson, type RouteContext, type Router } from './http-kit.js';

export interface SessionRouteDeps {
  readonly sessions: SessionManager;
  readonly engine: SessionEngine;
  readonly tempRoot: string;
  readonly createRedactor: (secrets: readonly string[]) => Transform;
  /** Bytes one NDJSON exec stream may hold for a client that does not read; past it the exec is killed. */
  readonly streamBufferCap: number;
  readonly logger: Logger;
}

function absolutePathParam(query: URLSearchParams): string {
  const path = query.get('path');
  if (path === null || !path.startsWith('/') || path.includes('\0')) {
    throw ApiError.invalid('the archive request', [{ path: 'path', rule: 'must be an absolute path in the container' }]);
  }
  return path;
}

/** Resolves on 'drain' (the socket took what was queued), on 'close', or when `stopped` aborts. */
function drained(res: ServerResponse, stopped: AbortSignal): Promise<void> {
  if (res.destroyed || stopped.aborted) return Promise.resolve();
  const settled = new AbortController();
  const { signal } = settled;
  return Promise.race([once(res, 'drain', { signal }), once(res, 'close', { signal }), once(stopped, 'abort', { signal })]).then(
    () => settled.abort(),
    () => settled.abort(),
  );
}

/**
 * The NDJSON output of a streamed exec with backpressure: while the socket is full, the exec's output is not read
 * (the engine, then the exec, wait). What the server holds for the client — the response's queue — is capped:
 * past `cap` bytes the exec is killed (`slowReader` aborts with reason `slow_reader`) and the stream ends with an
 * `E_SLOW_READER` error record.
 */
function ndjsonObserver(res: ServerResponse, cap: number, slowReader: AbortController): ExecObserver {
  return {
    onOutput: async (stream, data, stopped) => {
      if (slowReader.signal.aborted || res.destroyed) return;
      if (res.write(`${JSON.stringify({ stream, data })}\n`)) return;
      if (res.writableLength > cap) {
        slowReader.abort('slow_reader');
        return;
      }
      await drained(res, stopped);
    },
  };
}

/** POST /v1/sessions/{id}/exec: one JSON answer, or (`?stream=1`) NDJSON output events ending with the exit or an error. */
async function exec(deps: SessionRouteDeps, { req, res, params, query, clientGone }: RouteContext): Promise<void> {
  const { sessions } = deps;
  const body = parseBody(ExecSchema, await readJson(req), 'the exec request');
  const id = params['id'] ?? '';
  if (query.get('stream') !== '1') {
    sendJson(res, 200, await sessions.exec(id, body, { signal: clientGone }));
    return;
  }
  sessions.secretsOf(id); // 404/409 before the stream starts
  res.writeHead(200, { 'content-type': 'application/x-ndjson' });
  const write = (event: unknown): void => void res.write(`${JSON.stringify(event)}\n`);
  const slowReader = new AbortController();
  try {
    const signal = AbortSignal.any([clientGone, slowReader.signal]);
    const result = await sessions.exec(id, body, { signal, observer: ndjsonObserver(res, deps.streamBufferCap, slowReader) });
    if (slowReader.signal.aborted) {
      deps.logger.warn({ session: id, cap_bytes: deps.streamBufferCap }, 'streamed exec killed: the client read too slowly');
      const message = `the client read too slowly: more than ${deps.streamBufferCap} bytes of output were waiting for it (--stream-buffer-cap); the exec was killed`;
      write({ error: { code: 'E_SLOW_READER', message, issues: [] } });
    } else {
      write({ exit: { return_code: result.return_code, timed_out: result.timed_out, duration_ms: result.duration_ms } });
    }
  } catch (err) {
    const api = toApiError(err);
    write({ error: { code: api.code, message: api.message, issues: api.issues } });
  }
  res.end();
}

/** PUT /v1/sessions/{id}/archive: the client's tar, checked entry by entry, unpacked into `path` (made if needed). */
async function putArchive(deps: SessionRouteDeps, { req, res, params, query }: RouteContext): Promise<void> {
  const { sessions, engine } = deps;
  const dir = absolutePathParam(query);
  const transfer = sessions.beginArchive(params['id'] ?? '');
  const container = transfer.containerId;
  let upload: Awaited<ReturnType<typeof checkUpload>>;
  try {
    upload = await checkUpload(req, deps.tempRoot);
  } catch (err) {
    transfer.end();
    throw err;
  }
  try {
    if (upload.refusals.length > 0) {
      throw ApiError.invalid('the archive', upload.refusals.map((rule) => ({ path: 'body', rule })));
    }
    const mkdir = await engine.exec(container, { argv: ['mkdir', '-p', dir] });
    mkdir.stdout.resume();
    mkdir.stderr.resume();
    const code = await mkdir.done;
    if (code !== 0) throw ApiError.invalid('the archive request', [{ path: 'path', rule: 'cannot be created in the container' }]);
    await engine.putArchive(container, dir, openChecked(upload));
    sendJson(res, 200, { files: upload.files, bytes: upload.bytes });
  } finally {
    transfer.end();
    await upload.dispose();
  }
}

/** GET /v1/sessions/{id}/archive: `path` as a tar, every file redacted, only regular files and directories. */
async function getArchive(deps: SessionRouteDeps, { res, params, query, clientGone }: RouteContext): Promise<void> {
  const path = absolutePathParam(query);
  const id = params['id'] ?? '';
  const { containerId, secrets, end } = deps.sessions.beginArchive(id);
  try {
    const archive = await deps.engine.getArchive(containerId, path);
    if (archive === null) throw ApiError.notFound(`${path} in session ${id}`);
    const download = await redactedDownload(archive, deps.tempRoot, () => deps.createRedactor(secrets), clientGone);
    res.writeHead(200, {
      'content-type': 'application/x-tar',
      'x-roboguide-files': String(download.files),
      'x-roboguide-refusals': String(download.refusals.length),
    });
    await pipeline(download.stream, res).catch(() => undefined);
  } finally {
    end();
  }
}

/** /v1/sessions…: create, list, exec (JSON or NDJSON), archives in and out, keepalive, delete. */
export function registerSessionRoutes(router: Router, deps: SessionRouteDeps): void {
  const { sessions } = deps;

  router.add('POST', '/v1/sessions', async ({ req, res }) => {
    const body = parseBody(SessionCreateSchema, await readJson(req), 'the session request');
    sendJson(res, 201, await sessions.create(body));
  });

  router.add('GET', '/v1/sessions', ({ res }) => {
    sendJson(res, 200, { sessions: sessions.list() });
    return Promise.resolve();
  });

  router.add('GET', '/v1/sessions/{id}', async ({ res, params }) => {
    sendJson(res, 200, await sessions.detail(params['id'] ?? ''));
  });

  router.add('POST', '/v1/sessions/{id}/exec', (ctx) => exec(deps, ctx));
  router.add('PUT', '/v1/sessions/{id}/archive', (ctx) => putArchive(deps, ctx));
  router.add('GET', '/v1/sessions/{id}/archive', (ctx) => getArchive(deps, ctx));

  router.add('POST', '/v1/sessions/{id}/keepalive', async ({ res, params }) => {
    sendJson(res, 200, await sessions.keepalive(params['id'] ?? ''));
  });

  router.add('DELETE', '/v1/sessions/{id}', async ({ res, params }) => {
    // The deletion is not tied to this request: a client that goes away does not interrupt it.
    sendJson(res, 200, await sessions.delete(params['id'] ?? ''));
  });
}
