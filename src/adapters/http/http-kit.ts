import { createHash, timingSafeEqual } from 'node:crypto';
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
      route.names.forEach((name, i) => {
        params[name] = decodeURIComponent(m[i + 1] ?? '');
      });
      return { handler: route.handler, params, route: route.path };
    }
    return pathMatched ? 'method' : null;
  }
}

const MAX_JSON_BYTES = 16 * 1024 * 1024;

export async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of req) {
    total += (chunk as Buffer).length;
    if (total > MAX_JSON_BYTES)
      throw new ApiError(400, 'E_REQUEST_INVALID', `request body larger than ${MAX_JSON_BYTES} bytes`, [
        { path: '$', rule: 'too large' },
      ]);
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') return {};
  try {
    return JSON.parse(text) as unknown;
  } catch {
    // The parser's message quotes the input, which may hold a secret: say only that it is not JSON.
    throw new ApiError(400, 'E_REQUEST_INVALID', 'request body is not valid JSON', [
      { path: '$', rule: 'must be JSON' },
    ]);
  }
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const bytes = Buffer.from(JSON.stringify(body));
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': bytes.length });
  res.end(bytes);
}

export function sendError(res: ServerResponse, err: unknown, logger: Logger): void {
  const api = toApiError(err);
  if (api.status === 500) logger.error({ error: (err as Error)?.message, code: api.code }, 'request failed');
  if (res.headersSent) {
    res.destroy();
    return;
  }
  if (api.retryAfterSec !== null) res.setHeader('retry-after', String(api.retryAfterSec));
  sendJson(res, api.status, { error: { code: api.code, message: api.message, issues: api.issues } });
}

/** Constant-time bearer check: both sides hashed first, so neither length nor content leaks through timing. */
export function bearerMatches(header: string | undefined, token: string): boolean {
  const given = /^Bearer (.+)$/.exec(header ?? '')?.[1] ?? '';
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(token).digest();
  return timingSafeEqual(a, b) && given.length > 0;
}
