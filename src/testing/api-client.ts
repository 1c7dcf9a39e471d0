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

export class ApiClient {
  readonly socketPath: string;
  constructor(socketPath: string) {
    this.socketPath = socketPath;
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

  async call<T = unknown>(method: string, path: string, options: RequestOptions = {}): Promise<ApiResponse<T>> {
    const res = await this.open(method, path, options);
    const chunks: Buffer[] = [];
    for await (const chunk of res) chunks.push(chunk as Buffer);
    const bytes = Buffer.concat(chunks);
    const type = res.headers['content-type'] ?? '';
    const body = (type.startsWith('application/json') ? JSON.parse(bytes.toString('utf8')) : bytes) as T;
    return { status: res.statusCode ?? 0, headers: res.headers, body };
  }
}
