import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { duplexPair } from 'node:stream';
import tls from 'node:tls';
import type { EgressRecord } from '../../src/core/egress/record.js';

/** Shared pieces of the egress tests (issue 42): a ClientHello to send through a tunnel, the pair's shell helpers. */

/** The first bytes a TLS 1.2 client sends for `servername`: what the pair sends through a tunnel. */
export async function clientHello(servername: string): Promise<Buffer> {
  const [ours, theirs] = duplexPair();
  const socket = tls.connect({ socket: ours, servername, rejectUnauthorized: false, maxVersion: 'TLSv1.2' });
  socket.on('error', () => undefined);
  const hello = await new Promise<Buffer>((resolve) =>
    theirs.once('data', (chunk: Buffer) => resolve(chunk)),
  );
  socket.destroy();
  return hello;
}

/** The pair's shell helpers: the proxy's address and credentials from HTTP_PROXY, a request, a tunnel. */
export const HELPERS = [
  'P=${HTTP_PROXY#http://}; CRED=${P%@*}; HP=${P#*@}; PH=${HP%:*}; PP=${HP##*:}',
  'AUTH=$(printf %s "$CRED" | base64 | tr -d "\\n")',
  // The write side kept open while the answer comes, as an HTTP client does (busybox nc half-closes at its input's end).
  `req() { (printf '%s HTTP/1.1\\r\\nHost: %s\\r\\nProxy-Authorization: Basic %s\\r\\nConnection: close\\r\\n\\r\\n' "$2" "$3" "$AUTH"; sleep 2) | timeout 10 nc -w 5 $PH $PP > out-$1 2>&1; }`,
  `tunnel() { (printf 'CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\nProxy-Authorization: Basic %s\\r\\n\\r\\n' "$2" "$2" "$AUTH"; sleep 1; cat $3; sleep 3) | timeout 10 nc -w 5 $PH $PP > out-$1 2>&1; }`,
].join('\n');

/** A pair's `egress.jsonl`, one record a line. */
export async function egressRecords(dir: string): Promise<EgressRecord[]> {
  return (await readFile(join(dir, 'evidence', 'egress.jsonl'), 'utf8'))
    .trim()
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as EgressRecord);
}
