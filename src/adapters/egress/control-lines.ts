import type net from 'node:net';

/**
 * The egress control protocol's framing, at both ends (the broker and the proxy process): UTF-8, one JSON message a
 * line. `onLine` gets each complete line in order; a peer holding more than `maxPendingChars` without a newline is
 * cut (the proxy's guard against a client that never ends its line).
 */
export function readLines(
  socket: net.Socket,
  onLine: (line: string) => void,
  maxPendingChars = Infinity,
): void {
  let buffered = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    buffered += chunk;
    for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      onLine(line);
    }
    if (buffered.length > maxPendingChars) socket.destroy();
  });
}
