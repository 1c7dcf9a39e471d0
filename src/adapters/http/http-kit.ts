import { createHash, timingSafeEqual } from 'node:crypto';
import { once } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ApiError, toApiError } from '../../app/serve/api-error.js';
import type { Logger } from '../../app/ports/logger.js';

/** A tiny router over node:http: one module per resource registers its routes here. */
export interface RouteContext {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly params: Readonly<Record<string, string>>;
  readonly query: URLSearchParams;
  /** Aborts when the client goes away before the response is finished. */
  readonly clientGone: AbortSignal;
}

export type Handler = (ctx: RouteContext) => Promise<void>;

interface Route {
  readonly method: string;
  /** The pattern as registered (`/v1/sessions/{id}`): the metrics' `route` label. */
  readonly path: string;
  readonly pattern: RegExp;
  readonly names: readonly string[];
  readonly handler: Handler;
}

export class Router {
  readonly #routes: Route[] = [];

  add(method: string, path: string, handler: Handler): void {
    const names: string[] = [];
    const pattern = new RegExp(
      `^${path.replace(/\{(\w+)\}/g, (_m, name: string) => {
        names.push(name);
        return '([^/]+)';
      })}$`,
    );
    this.#routes.push({ method, path, pattern, names, handler });
  }

  match(
    method: string,
    path: string,
  ): { handler: Handler; params: Record<string, string>; route: string } | 'method' | null {
    let pathMatched = false;
    for (const route of this.#routes) {
      const m = route.pattern.exec(path);
      if (m === null) continue;
      pathMatched = true;
      if (route.method !== method) continue;
      const params: Record<string, string> = {};
      for (const [i, name] of route.names.entries()) {
        const raw = m[i + 1] ?? '';
        try {
          params[name] = decodeURIComponent(raw);
        } catch {
          throw ApiError.invalid('the request path', [
            { path: name, rule: 'must be valid percent-encoded UTF-8 (a "%" followed by two hex digits)' },
          ]);
        }
      }
      return { handler: route.handler, params, route: route.path };
    }
    return pathMatched ? 'method' : null;
  }
}

/**
 * The query string's parameters, each name and value checked as percent-encoded UTF-8 first: `URLSearchParams`
 * alone turns `%ZZ` into itself and `%C3%28` into U+FFFD, so a file path would silently name another file. A bad one
 * is a 400 naming the parameter.
 */
export function strictQuery(search: string): URLSearchParams {
  const raw = search.startsWith('?') ? search.slice(1) : search;
  for (const pair of raw.split('&')) {
    if (pair === '') continue;
    const eq = pair.indexOf('=');
    const name = eq < 0 ? pair : pair.slice(0, eq);
    for (const part of eq < 0 ? [name] : [name, pair.slice(eq + 1)]) {
      try {
        decodeURIComponent(part.replace(/\+/g, ' '));
      } catch {
        throw ApiError.invalid('the query string', [
          {
            path: safeName(name),
            rule: 'must be valid percent-encoded UTF-8 (a "%" followed by two hex digits)',
          },
        ]);
      }
    }
  }
  return new URLSearchParams(raw);
}

/** A parameter's name for an error message: decoded when it can be, at most 64 characters. */
function safeName(name: string): string {
  let decoded: string;
  try {
    decoded = decodeURIComponent(name.replace(/\+/g, ' '));
  } catch {
    decoded = name;
  }
  return decoded.replace(/[^\x20-\x7e]/g, '?').slice(0, 64);
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const bytes = Buffer.from(JSON.stringify(body));
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': bytes.length });
  res.end(bytes);
}

/**
 * Characters of one long string serialized between two turns of the event loop: JSON writes a control character as 6
 * bytes, so a piece is at most 1.5 MB of output, a few milliseconds of work.
 */
const JSON_PIECE_CHARS = 256 * 1024;

/**
 * `sendJson` for an answer whose strings may be long (an exec's output: 16 MiB of control bytes is 96 MB of JSON, and
 * serialized at once it held the server 1.2 s; issue 39). Exactly JSON.stringify's text, written a piece at a time
 * with a turn of the event loop between pieces and the socket's backpressure honoured, in chunked encoding (its length
 * is not known up front). A short answer goes out as `sendJson`'s. Stops writing when the client is gone.
 */
export async function sendLargeJson(
  res: ServerResponse,
  status: number,
  body: Readonly<Record<string, unknown>>,
): Promise<void> {
  let chars = 0;
  for (const value of Object.values(body)) if (typeof value === 'string') chars += value.length;
  if (chars <= JSON_PIECE_CHARS) {
    sendJson(res, status, body);
    return;
  }
  res.writeHead(status, { 'content-type': 'application/json' });
  const write = async (text: string): Promise<void> => {
    if (!res.destroyed && !res.write(text)) await drained(res);
  };
  let separator = '{';
  for (const [key, value] of Object.entries(body)) {
    const json = typeof value === 'string' && value.length > JSON_PIECE_CHARS ? null : JSON.stringify(value);
    if (json === undefined) continue; // as JSON.stringify leaves out an undefined member
    await write(`${separator}${JSON.stringify(key)}:`);
    separator = ',';
    if (json !== null) {
      await write(json);
      continue;
    }
    const text = value as string;
    await write('"');
    for (let at = 0; at < text.length && !res.destroyed;) {
      let end = Math.min(text.length, at + JSON_PIECE_CHARS);
      // Never between the two halves of a surrogate pair (each would be written as a lone escape).
      const last = text.charCodeAt(end - 1);
      if (end < text.length && last >= 0xd800 && last < 0xdc00) end -= 1;
      await write(JSON.stringify(text.slice(at, end)).slice(1, -1));
      at = end;
      await new Promise((resolve) => setImmediate(resolve));
    }
    await write('"');
  }
  if (!res.destroyed) res.end(separator === '{' ? '{}' : '}');
}

/** Resolves on 'drain' (the socket took what was queued), on 'close', or when `stopped` aborts. */
export function drained(res: ServerResponse, stopped?: AbortSignal): Promise<void> {
  if (res.destroyed || stopped?.aborted === true) return Promise.resolve();
  const settled = new AbortController();
  const { signal } = settled;
  return Promise.race([
    once(res, 'drain', { signal }),
    once(res, 'close', { signal }),
    ...(stopped !== undefined ? [once(stopped, 'abort', { signal })] : []),
  ]).then(
    () => settled.abort(),
    () => settled.abort(),
  );
}

/** How long an error answer keeps reading (and dropping) the rest of a body the client is still sending. */
export const LINGER_MS = 5_000;

/**
 * An error answer. When the request's body has not been read to its end (a body over a limit, a route that refused
 * before reading it), the answer says `Connection: close` and goes out at once, and the rest of the body is read and
 * dropped until it ends (at most LINGER_MS) before the connection closes: a client that sends its whole body before
 * it reads (Python's http.client) gets the answer, not a reset. 408 (the client stopped sending) closes at once.
 */
export function sendError(res: ServerResponse, err: unknown, logger: Logger, req?: IncomingMessage): void {
  const api = toApiError(err);
  if (api.status === 500) logger.error({ error: (err as Error)?.message, code: api.code }, 'request failed');
  if (res.headersSent) {
    res.destroy();
    return;
  }
  if (api.retryAfterSec !== null) res.setHeader('retry-after', String(api.retryAfterSec));
  const body = { error: { code: api.code, message: api.message, issues: api.issues } };
  if (req === undefined || req.complete) {
    sendJson(res, api.status, body);
    return;
  }
  const bytes = Buffer.from(JSON.stringify(body));
  res.writeHead(api.status, {
    'content-type': 'application/json',
    'content-length': bytes.length,
    connection: 'close',
  });
  if (api.status === 408) {
    res.end(bytes);
    return;
  }
  res.write(bytes);
  const end = (): void => {
    clearTimeout(timer);
    if (!res.writableEnded) res.end();
  };
  const timer = setTimeout(end, LINGER_MS);
  req.once('end', end);
  req.once('close', end);
  req.resume();
}

/** Constant-time bearer check: both sides hashed first, so neither length nor content leaks through timing. */
export function bearerMatches(header: string | undefined, token: string): boolean {
  const given = /^Bearer (.+)$/.exec(header ?? '')?.[1] ?? '';
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(token).digest();
  return timingSafeEqual(a, b) && given.length > 0;
}
