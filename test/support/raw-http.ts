// HTTP/1.1 written by hand on a socket: requests a well-behaved client never sends (a body larger than it says, a
// body sent whole before reading, bytes that are not UTF-8), and the answer as it came, with how the socket ended.
import { connect, type Socket } from 'node:net';

export interface RawAnswer {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
  /** A socket error the client saw (EPIPE, ECONNRESET) while sending or reading; null when it ended cleanly. */
  readonly socketError: string | null;
}

/** Status line, headers and body of the first answer in `bytes` (null until the head and the whole body are there). */
export function parseAnswer(bytes: Buffer): Omit<RawAnswer, 'socketError'> | null {
  const end = bytes.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const [statusLine = '', ...lines] = bytes.subarray(0, end).toString('latin1').split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const length = Number(headers['content-length'] ?? '-1');
  const body = bytes.subarray(end + 4);
  if (length >= 0 && body.length < length) return null;
  return {
    status: Number(statusLine.split(' ')[1]),
    headers,
    body: body.subarray(0, length >= 0 ? length : body.length).toString('utf8'),
  };
}

/**
 * Sends `head` (request line and headers, without the blank line) and `body` as they are — all written at once
 * before anything is read, as Python's http.client does — then waits for the answer, and when it says
 * `Connection: close`, for the server to close (at most `waitMs`).
 */
export function rawRequest(
  socketPath: string,
  head: string,
  body: Buffer | string = '',
  options: { readonly waitMs?: number; readonly socket?: Socket } = {},
): Promise<RawAnswer> {
  return new Promise((resolve) => {
    const socket = options.socket ?? connect(socketPath);
    const received: Buffer[] = [];
    let socketError: string | null = null;
    let settled = false;
    const finish = (): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      const answer = parseAnswer(Buffer.concat(received));
      resolve(
        answer === null ? { status: 0, headers: {}, body: '', socketError } : { ...answer, socketError },
      );
    };
    const timer = setTimeout(finish, options.waitMs ?? 30_000);
    socket.on('data', (chunk: Buffer) => {
      received.push(chunk);
      // A complete answer that keeps the connection: done. One that closes it: wait for the close (a reset shows).
      const answer = parseAnswer(Buffer.concat(received));
      if (answer !== null && answer.headers['connection'] !== 'close') finish();
    });
    socket.on('error', (err: NodeJS.ErrnoException) => {
      socketError = err.code ?? err.message;
      finish();
    });
    socket.on('close', finish);
    socket.write(`${head}\r\n\r\n`);
    if (body.length > 0) socket.write(body);
  });
}
