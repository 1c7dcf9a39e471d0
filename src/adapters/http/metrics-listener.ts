import { createServer, type Server } from 'node:http';
import { bearerMatches } from './http-kit.js';

export interface MetricsListenerOptions {
  readonly host: string;
  readonly port: number;
  /** Every request needs `Authorization: Bearer <token>` when set (else 401). */
  readonly token: string | null;
  /** The Prometheus text and its content type. */
  readonly render: () => Promise<{ readonly contentType: string; readonly body: string }>;
}

export interface RunningMetricsListener {
  readonly port: number;
  close(): Promise<void>;
}

/** `roboguide-eval metrics`' HTTP side: GET /metrics and nothing else (404), bearer-checked when a token is set. */
export async function startMetricsListener(options: MetricsListenerOptions): Promise<RunningMetricsListener> {
  const server: Server = createServer({ keepAliveTimeout: 30_000 }, (req, res) => {
    const answer = (status: number, text: string): void => {
      res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8' });
      res.end(text);
    };
    if (options.token !== null && !bearerMatches(req.headers.authorization, options.token)) {
      res.setHeader('www-authenticate', 'Bearer');
      answer(401, 'a valid bearer token is required\n');
      return;
    }
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    if (req.method !== 'GET' || path !== '/metrics') {
      answer(404, 'only GET /metrics is served here\n');
      return;
    }
    options.render().then(
      ({ contentType, body }) => {
        res.writeHead(200, { 'content-type': contentType });
        res.end(body);
      },
      (err: unknown) => answer(500, `scan failed: ${(err as Error).message}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return {
    port: (server.address() as { port: number }).port,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
