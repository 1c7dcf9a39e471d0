import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable, type Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ApiError, parseBody, toApiError } from '../../app/serve/api-error.js';
import { containerPathProblem } from '../../app/serve/request-fields.js';
import { ExecSchema, type ExecRequest } from '../../app/serve/exec-schemas.js';
import { EgressPolicySchema, SessionCreateSchema } from '../../app/serve/session-schemas.js';
import type { SessionEngine } from '../../app/ports/container-runtime.js';
import type { SessionManager } from '../../app/serve/session-manager.js';
import type { ExecObserver } from '../../app/serve/session-exec.js';
import type { Logger } from '../../app/ports/logger.js';
import { checkUpload, openChecked, UnwrittenCopyError } from '../serve-archive.js';
import { downloadTar, readOneFile, uploadTar, writeOneFile, type SpooledDownload } from './serve-files.js';
import { userParam, type FileTarget } from './serve-files-exec.js';
import { DEFAULT_EXTRACT_LIMITS } from '../safe-extract.js';
import { drained, sendJson, sendLargeJson, type RouteContext, type Router } from './http-kit.js';
import { bodyTimeout, DEFAULT_JSON_LIMITS, JsonShapeScanner, readJson } from './json-body.js';
import { idleLimitedBody } from './idle-body.js';

export interface SessionRouteDeps {
  readonly sessions: SessionManager;
  readonly engine: SessionEngine;
  readonly tempRoot: string;
  readonly createRedactor: (secrets: readonly string[]) => Transform;
  /** Bytes one NDJSON exec stream may hold for a client that does not read; past it the exec is killed. */
  readonly streamBufferCap: number;
  readonly logger: Logger;
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

/** The streamed exec form: one line of JSON (the request, without stdin), `\n`, then the raw stdin to the end. */
export const EXEC_STREAM_TYPE = 'application/vnd.roboguide.exec-stream';
const MAX_HEAD_BYTES = 1024 * 1024;

/**
 * The exec request: a JSON body, or (Content-Type EXEC_STREAM_TYPE) its first line, with the rest of the body as
 * the command's stdin, streamed (never held whole: the exec reads it with backpressure).
 */
async function execRequest(
  req: IncomingMessage,
): Promise<{ body: ExecRequest; stdin: Readable | undefined }> {
  const type = (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase();
  if (type !== EXEC_STREAM_TYPE)
    return { body: parseBody(ExecSchema, await readJson(req), 'the exec request'), stdin: undefined };
  const chunks = req[Symbol.asyncIterator]();
  const head: Buffer[] = [];
  let held = 0;
  let rest: Buffer = Buffer.alloc(0);
  // The first line is held to the JSON body's depth and value limits while it arrives (before it is parsed).
  const shape = new JsonShapeScanner(DEFAULT_JSON_LIMITS);
  for (;;) {
    const next = await chunks.next();
    if (next.done === true) break;
    const chunk = next.value as Buffer;
    const newline = chunk.indexOf(0x0a);
    const part = newline >= 0 ? chunk.subarray(0, newline) : chunk;
    const broken = shape.feed(part);
    if (broken !== null) throw ApiError.invalid('the exec request', [{ path: '$', rule: broken }]);
    head.push(part);
    if (newline >= 0) {
      rest = chunk.subarray(newline + 1);
      break;
    }
    held += chunk.length;
    if (held > MAX_HEAD_BYTES)
      throw ApiError.invalid('the exec request', [
        {
          path: '$',
          rule: `the first line (the JSON request) must end with a newline within ${MAX_HEAD_BYTES} bytes`,
        },
      ]);
  }
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(Buffer.concat(head))) as unknown;
  } catch {
    throw ApiError.invalid('the exec request', [
      { path: '$', rule: 'the first line must be the exec request as JSON' },
    ]);
  }
  const body = parseBody(ExecSchema, value, 'the exec request');
  if (body.stdin !== undefined || body.stdin_base64 !== undefined) {
    throw ApiError.invalid('the exec request', [
      {
        path: body.stdin !== undefined ? 'stdin' : 'stdin_base64',
        rule: 'must be absent in the streamed form (the stdin is the body after the first line)',
      },
    ]);
  }
  const source = async function* (): AsyncGenerator<Buffer> {
    if (rest.length > 0) yield rest;
    for (;;) {
      const next = await chunks.next();
      if (next.done === true) return;
      yield next.value as Buffer;
    }
  };
  return { body, stdin: Readable.from(source(), { objectMode: false }) };
}

/** POST /v1/sessions/{id}/exec: one JSON answer, or (`?stream=1`) NDJSON output events ending with the exit or an error. */
async function exec(
  deps: SessionRouteDeps,
  { req, res, params, query, clientGone }: RouteContext,
): Promise<void> {
  const { sessions } = deps;
  const { body, stdin } = await execRequest(req);
  const id = params['id'] ?? '';
  if (query.get('stream') !== '1') {
    const result = await sessions.exec(id, body, { signal: clientGone, ...(stdin ? { stdin } : {}) });
    // Its output may be megabytes of escapes: written in pieces, no other client waiting on it (issue 39).
    await sendLargeJson(res, 200, result);
    return;
  }
  sessions.secretsOf(id); // 404/409 before the stream starts
  res.writeHead(200, { 'content-type': 'application/x-ndjson' });
  const write = (event: unknown): void => void res.write(`${JSON.stringify(event)}\n`);
  const slowReader = new AbortController();
  try {
    const signal = AbortSignal.any([clientGone, slowReader.signal]);
    const result = await sessions.exec(id, body, {
      signal,
      observer: ndjsonObserver(res, deps.streamBufferCap, slowReader),
      ...(stdin ? { stdin } : {}),
    });
    if (slowReader.signal.aborted) {
      deps.logger.warn(
        { session: id, cap_bytes: deps.streamBufferCap },
        'streamed exec killed: the client read too slowly',
      );
      const message = `the client read too slowly: more than ${deps.streamBufferCap} bytes of output were waiting for it (--stream-buffer-cap); the exec was killed`;
      write({ error: { code: 'E_SLOW_READER', message, issues: [] } });
    } else {
      write({
        exit: {
          return_code: result.return_code,
          timed_out: result.timed_out,
          duration_ms: result.duration_ms,
          interrupted: result.interrupted,
        },
      });
    }
  } catch (err) {
    const api = toApiError(err);
    write({ error: { code: api.code, message: api.message, issues: api.issues } });
  }
  res.end();
}

/** The `path` query parameter: a path in the container, absolute or relative to the session's working directory. */
function pathParam(query: URLSearchParams): string {
  const path = query.get('path');
  const problem =
    path === null
      ? "must be a path in the container (absolute, or relative to the session's working directory)"
      : containerPathProblem(path);
  if (problem !== null) throw ApiError.invalid('the request', [{ path: 'path', rule: problem }]);
  return path ?? '';
}

/** The `mode` query parameter of a file upload: absent, or octal permission bits (e.g. 0644, 755). */
function modeParam(query: URLSearchParams): string | undefined {
  const mode = query.get('mode');
  if (mode === null) return undefined;
  if (!/^0?[0-7]{3}$/.test(mode))
    throw ApiError.invalid('the request', [
      { path: 'mode', rule: 'must be octal permission bits, e.g. 0644 or 755' },
    ]);
  return mode;
}

/**
 * A file transfer of a session as a user, with the path resolved; `end(succeeded)` frees its slot (429 past the
 * limits), and renews the session's TTL only when the transfer succeeded.
 */
async function beginTransfer(
  deps: SessionRouteDeps,
  params: Readonly<Record<string, string>>,
  query: URLSearchParams,
): Promise<{ target: FileTarget; end: (succeeded?: boolean) => void }> {
  const path = pathParam(query);
  const user = userParam(query);
  const t = await deps.sessions.beginArchive(params['id'] ?? '', { path, user });
  return {
    target: {
      engine: deps.engine,
      containerId: t.containerId,
      user: t.user,
      path: t.path,
      secrets: t.secrets,
    },
    end: t.end,
  };
}

/** Sends a spooled file (tar or raw bytes), then removes it. */
async function sendSpooled(
  res: ServerResponse,
  spooled: SpooledDownload,
  headers: Record<string, string>,
): Promise<void> {
  try {
    const size = (await stat(spooled.path)).size;
    res.writeHead(200, { ...headers, 'content-length': String(size) });
    await pipeline(createReadStream(spooled.path), res).catch(() => undefined);
  } finally {
    await spooled.dispose();
  }
}

/**
 * PUT /v1/sessions/{id}/archive: the client's tar, checked entry by entry (links only inside the destination),
 * unpacked into `path` (made if needed) inside the container as the user.
 */
async function putArchive(deps: SessionRouteDeps, { req, res, params, query }: RouteContext): Promise<void> {
  const { target, end } = await beginTransfer(deps, params, query);
  let succeeded = false;
  let upload: Awaited<ReturnType<typeof checkUpload>>;
  const incoming = idleLimitedBody(req, DEFAULT_JSON_LIMITS.idleTimeoutMs);
  try {
    upload = await checkUpload(incoming.body, deps.tempRoot);
  } catch (err) {
    end();
    throw err;
  } finally {
    incoming.release();
  }
  try {
    // The client stopped sending (408), or its request failed (its fault, whatever the check made of the part that
    // came: never the server's disk).
    if (incoming.timedOut() || incoming.broken()) {
      throw incoming.timedOut()
        ? bodyTimeout(DEFAULT_JSON_LIMITS.idleTimeoutMs)
        : ApiError.invalid('the archive', [{ path: 'body', rule: 'request body ended early' }]);
    }
    // The server's disk did not take the checked copy (507 when full: toApiError). First: the check itself ends with
    // the copy (its packer is gone), so what it refused after that says nothing of the archive.
    if (upload.unwritten !== null) throw new UnwrittenCopyError(upload.unwritten);
    if (upload.refusals.length > 0) {
      throw ApiError.invalid(
        'the archive',
        upload.refusals.map((rule) => ({ path: 'body', rule })),
      );
    }
    await uploadTar(target, () => openChecked(upload), upload.nonDirectories);
    sendJson(res, 200, { files: upload.files, bytes: upload.bytes });
    succeeded = true;
  } finally {
    end(succeeded);
    await upload.dispose();
  }
}

/** GET /v1/sessions/{id}/archive: `path` as a tar made by the user, every file redacted, modes and links kept. */
async function getArchive(
  deps: SessionRouteDeps,
  { res, params, query, clientGone }: RouteContext,
): Promise<void> {
  const { target, end } = await beginTransfer(deps, params, query);
  let succeeded = false;
  try {
    const download = await downloadTar(
      target,
      deps.tempRoot,
      () => deps.createRedactor(target.secrets),
      clientGone,
    );
    await sendSpooled(res, download, {
      'content-type': 'application/x-tar',
      'x-roboguide-files': String(download.files),
      'x-roboguide-refusals': String(download.refusals.length),
    });
    succeeded = res.writableFinished; // all of it sent: a client gone half-way renews nothing
  } finally {
    end(succeeded);
  }
}

/** Bytes one GET …/file may answer with; a larger file is fetched as an archive. */
const MAX_FILE_BYTES = DEFAULT_EXTRACT_LIMITS.maxFileBytes;

/** GET /v1/sessions/{id}/file: one file's bytes, read by the user, redacted. */
async function getFile(deps: SessionRouteDeps, { res, params, query }: RouteContext): Promise<void> {
  const { target, end } = await beginTransfer(deps, params, query);
  let succeeded = false;
  try {
    const file = await readOneFile(
      target,
      deps.tempRoot,
      () => deps.createRedactor(target.secrets),
      MAX_FILE_BYTES,
    );
    await sendSpooled(res, file, { 'content-type': 'application/octet-stream' });
    succeeded = res.writableFinished; // all of it sent: a client gone half-way renews nothing
  } finally {
    end(succeeded);
  }
}

/** PUT /v1/sessions/{id}/file: the raw body (streamed) into one file, written by the user. */
async function putFile(deps: SessionRouteDeps, { req, res, params, query }: RouteContext): Promise<void> {
  const mode = modeParam(query);
  let transfer: Awaited<ReturnType<typeof beginTransfer>>;
  try {
    transfer = await beginTransfer(deps, params, query);
  } catch (err) {
    req.resume();
    throw err;
  }
  let succeeded = false;
  const incoming = idleLimitedBody(req, DEFAULT_JSON_LIMITS.idleTimeoutMs);
  try {
    const { bytes } = await writeOneFile(transfer.target, incoming.body, mode).catch((err: unknown) => {
      // The client stopped sending: 408, whatever the writer made of the part that came.
      throw incoming.timedOut() ? bodyTimeout(DEFAULT_JSON_LIMITS.idleTimeoutMs) : err;
    });
    if (incoming.timedOut()) throw bodyTimeout(DEFAULT_JSON_LIMITS.idleTimeoutMs);
    sendJson(res, 200, { path: transfer.target.path, bytes });
    succeeded = true;
  } finally {
    incoming.release();
    transfer.end(succeeded);
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
  router.add('GET', '/v1/sessions/{id}/file', (ctx) => getFile(deps, ctx));
  router.add('PUT', '/v1/sessions/{id}/file', (ctx) => putFile(deps, ctx));

  // The new policy holds for every connection made after the 200 (docs/spec.md §5.6).
  router.add('PUT', '/v1/sessions/{id}/egress', async ({ req, res, params }) => {
    const body = parseBody(EgressPolicySchema, await readJson(req), 'the egress policy');
    sendJson(res, 200, await sessions.setEgress(params['id'] ?? '', body));
  });

  router.add('POST', '/v1/sessions/{id}/keepalive', async ({ res, params }) => {
    sendJson(res, 200, await sessions.keepalive(params['id'] ?? ''));
  });

  router.add('DELETE', '/v1/sessions/{id}', async ({ res, params }) => {
    // The deletion is not tied to this request: a client that goes away does not interrupt it.
    sendJson(res, 200, await sessions.delete(params['id'] ?? ''));
  });
}
