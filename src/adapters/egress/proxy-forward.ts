import http from 'node:http';

/** How long the upstream server may take to accept the connection (a plain request's, a tunnel's). */
export const UPSTREAM_CONNECT_TIMEOUT_MS = 15_000;

/** What one forwarded request moved, told once when it ended (answered, failed or cut). */
export interface Forwarded {
  readonly status: number | undefined;
  readonly bytesUp: number;
  readonly bytesDown: number;
}

/**
 * A plain HTTP request the proxy allowed, sent on to `to.address` (the address it chose, never the client's) without
 * its proxy headers, the answer piped back; a failure before the answer is a 502. A client gone before its request
 * was complete takes the upstream request with it (never sent half). `ended` is called once.
 */
export function forwardRequest(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  to: { readonly address: string; readonly port: number; readonly path: string },
  ended: (forwarded: Forwarded) => void,
): void {
  let up = 0;
  let down = 0;
  const headers = { ...req.headers };
  delete headers['proxy-authorization'];
  delete headers['proxy-connection'];
  const upstream = http.request({
    host: to.address,
    port: to.port,
    method: req.method ?? 'GET',
    path: to.path,
    headers,
    setHost: false,
    timeout: UPSTREAM_CONNECT_TIMEOUT_MS,
  });
  req.on('data', (chunk: Buffer) => (up += chunk.length));
  let status: number | undefined;
  let done = false;
  const finish = () => {
    if (done) return;
    done = true;
    ended({ status, bytesUp: up, bytesDown: down });
  };
  upstream.on('response', (answer) => {
    status = answer.statusCode;
    res.writeHead(answer.statusCode ?? 502, answer.headers);
    answer.on('data', (chunk: Buffer) => (down += chunk.length));
    answer.pipe(res);
    answer.on('end', finish);
    answer.on('error', finish);
  });
  upstream.on('timeout', () => upstream.destroy(new Error('upstream timeout')));
  upstream.on('error', () => {
    if (!res.headersSent) res.writeHead(502, { connection: 'close' }).end();
    else res.destroy();
    finish();
  });
  // A client gone before its request was complete: the upstream request goes too (never sent half).
  req.on('close', () => {
    if (!req.complete) upstream.destroy();
  });
  req.pipe(upstream);
}
