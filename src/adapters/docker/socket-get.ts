// One HTTP/1.1 GET on the engine's unix socket over `node:net`: `e1-batch status`'s fast path, and the engine's
// facts (`info`, with the headers that say which engine and API answered: engine-probe.ts). Not `node:http`:
// loading it costs that process about 55 ms and 13 MB (measured with Node 24 on the 2-core machine:
// `import('node:http')` against `import('node:net')`), more than the rest of the fast path together, and the
// fast path exists to answer within 0.3 s and 60 MB (docs/benchmarks.md, status). Everything else talks to the
// engine through dockerode.
import { connect, type Socket } from 'node:net';

/** The most a fast-path answer may hold (a list of a batch's containers is far smaller); past it: an error. */
const MAX_RESPONSE_BYTES = 64 * 1024 * 1024;

/** What the engine answered: its status code, its headers (names in lower case) and the body, de-chunked. */
export interface SocketResponse {
  readonly status: number;
  readonly headers: ReadonlyMap<string, string>;
  readonly body: Buffer;
}

/**
 * GET `path` on the unix socket at `socketPath` (`Connection: close`), the whole answer read. Rejects on a
 * connection error, an answer that is not HTTP/1.x or is cut short, one over 64 MiB, or no answer within
 * `timeoutMs` (code ETIMEDOUT). Any status is resolved: the caller judges it. `onSocket` is given the connection
 * as it is made (a caller that may never wait for the answer unrefs it).
 */
export function socketGet(
  socketPath: string,
  path: string,
  timeoutMs?: number,
  onSocket?: (socket: Socket) => void,
): Promise<SocketResponse> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const done = (err: Error | null, answer?: SocketResponse): void => {
      if (settled) return;
      settled = true;
      socket.destroy();
      if (err !== null) reject(err);
      else resolve(answer!);
    };
    const socket = connect(socketPath);
    onSocket?.(socket);
    if (timeoutMs !== undefined)
      socket.setTimeout(timeoutMs, () =>
        done(Object.assign(new Error(`no answer within ${timeoutMs} ms`), { code: 'ETIMEDOUT' })),
      );
    socket.on('error', (err) => done(err));
    socket.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_RESPONSE_BYTES)
        done(new Error(`the engine's answer exceeds ${MAX_RESPONSE_BYTES} bytes`));
      else chunks.push(chunk);
    });
    socket.on('end', () => {
      try {
        done(null, parseResponse(Buffer.concat(chunks)));
      } catch (err) {
        done(err as Error);
      }
    });
    socket.write(`GET ${path} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n`);
  });
}

/** A whole HTTP/1.x response: status line, headers, then a body by Content-Length, chunks, or up to the close. */
export function parseResponse(raw: Buffer): SocketResponse {
  const headEnd = raw.indexOf('\r\n\r\n');
  if (headEnd < 0) throw new Error('the engine closed the connection before the end of its headers');
  const lines = raw.subarray(0, headEnd).toString('latin1').split('\r\n');
  const statusLine = /^HTTP\/1\.[01] (\d{3})(?: |$)/.exec(lines[0] ?? '');
  if (statusLine === null) throw new Error(`not an HTTP/1.x answer: ${JSON.stringify(lines[0] ?? '')}`);
  const headers = new Map<string, string>();
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    if (colon > 0) headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
  }
  const rest = raw.subarray(headEnd + 4);
  const status = Number(statusLine[1]);
  if (/\bchunked\b/i.test(headers.get('transfer-encoding') ?? ''))
    return { status, headers, body: dechunk(rest) };
  const length = headers.get('content-length');
  if (length === undefined) return { status, headers, body: rest };
  const expected = Number(length);
  if (!/^\d+$/.test(length) || rest.length < expected)
    throw new Error(`the engine's answer was cut short (${rest.length} of ${length} bytes)`);
  return { status, headers, body: rest.subarray(0, expected) };
}

/** A chunked body (RFC 9112 §7.1) to its bytes; a body without its last (zero-size) chunk is cut short. */
function dechunk(raw: Buffer): Buffer {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const lineEnd = raw.indexOf('\r\n', at);
    if (lineEnd < 0) throw new Error("the engine's chunked answer was cut short");
    const sizeField = raw.subarray(at, lineEnd).toString('latin1').split(';')[0]!.trim();
    if (!/^[0-9a-fA-F]+$/.test(sizeField)) throw new Error(`a bad chunk size: ${JSON.stringify(sizeField)}`);
    const size = parseInt(sizeField, 16);
    if (size === 0) return Buffer.concat(parts);
    const start = lineEnd + 2;
    if (raw.length < start + size + 2) throw new Error("the engine's chunked answer was cut short");
    parts.push(raw.subarray(start, start + size));
    at = start + size + 2;
  }
}
