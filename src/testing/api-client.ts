import { request, type IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';

/** A small HTTP client over the server's unix socket (tests, benches, TypeScript callers). */
export interface ApiResponse<T = unknown> {
  readonly status: number;
  readonly headers: IncomingMessage['headers'];
  readonly body: T;
}

export interface RequestOptions {
  /** JSON body (objects) or raw bytes/stream (tar). */
  readonly body?: unknown;
  readonly raw?: Buffer | Readable;
  readonly signal?: AbortSignal;
  readonly headers?: Record<string, string>;
}

/**
 * A 4xx/5xx answer of the server, thrown by `call` (default mode): its status and the server's own error code,
 * message and issues (`{"error": {"code", "message", "issues"}}`, docs/serve.md), and the body as it came.
 */
export class ApiCallError extends Error {
  readonly status: number;
  readonly code: string;
  readonly issues: readonly { readonly path: string; readonly rule: string }[];
  readonly body: unknown;
  constructor(method: string, path: string, status: number, body: unknown) {
    const error = (body as { error?: { code?: unknown; message?: unknown; issues?: unknown } } | null)?.error;
    const code = typeof error?.code === 'string' ? error.code : `HTTP_${status}`;
    const detail =
      typeof error?.message === 'string'
        ? error.message
        : Buffer.isBuffer(body)
          ? body.toString('utf8').slice(0, 200)
          : '';
    const issues = Array.isArray(error?.issues) ? (error.issues as { path: string; rule: string }[]) : [];
    const lines = issues.map((i) => `\n  ${i.path}: ${i.rule}`).join('');
    super(`${method} ${path} → ${status} ${code}: ${detail}${lines}`);
    this.name = 'ApiCallError';
    this.status = status;
    this.code = code;
    this.issues = issues;
    this.body = body;
  }
}

export interface ApiClientOptions {
  /**
   * `throw` (default): `call` throws an ApiCallError on a 4xx/5xx answer, so a refused request (a misspelled
   * image, a missing variable) fails the test where it happened. `raw`: every answer is returned with its status,
   * for tests that assert on error answers (also reachable as `client.raw`).
   */
  readonly mode?: 'throw' | 'raw';
}

export class ApiClient {
  readonly socketPath: string;
  readonly mode: 'throw' | 'raw';
  constructor(socketPath: string, options: ApiClientOptions = {}) {
    this.socketPath = socketPath;
    this.mode = options.mode ?? 'throw';
  }

  /** The same server in raw mode: every answer returned with its status, none thrown. */
  get raw(): ApiClient {
    return this.mode === 'raw' ? this : new ApiClient(this.socketPath, { mode: 'raw' });
  }

  /** The response as a stream (tar downloads, NDJSON, followed logs). */
  open(method: string, path: string, options: RequestOptions = {}): Promise<IncomingMessage> {
    return new Promise((resolve, reject) => {
      const json = options.body !== undefined ? Buffer.from(JSON.stringify(options.body)) : undefined;
      const req = request(
        {
          socketPath: this.socketPath,
          method,
          path,
          headers: {
            ...(json ? { 'content-type': 'application/json', 'content-length': json.length } : {}),
            ...(options.raw ? { 'content-type': 'application/x-tar' } : {}),
            ...options.headers,
          },
          ...(options.signal ? { signal: options.signal } : {}),
        },
        resolve,
      );
      req.once('error', reject);
      if (options.raw && !Buffer.isBuffer(options.raw)) options.raw.pipe(req);
      else req.end(json ?? options.raw);
    });
  }

  async call<T = unknown>(
    method: string,
    path: string,
    options: RequestOptions = {},
  ): Promise<ApiResponse<T>> {
    const res = await this.open(method, path, options);
    const chunks: Buffer[] = [];
    for await (const chunk of res) chunks.push(chunk as Buffer);
    const bytes = Buffer.concat(chunks);
    const type = res.headers['content-type'] ?? '';
    const body = (type.startsWith('application/json') ? JSON.parse(bytes.toString('utf8')) : bytes) as T;
    const status = res.statusCode ?? 0;
    if (this.mode === 'throw' && status >= 400) throw new ApiCallError(method, path, status, body);
    return { status, headers: res.headers, body };
  }
}
