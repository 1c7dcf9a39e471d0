import type { IncomingMessage } from 'node:http';
import { PassThrough } from 'node:stream';
import { bodyTimeout } from './json-body.js';

/**
 * A streamed request body (an upload: `PUT …/archive`, `PUT …/file`) that must not pause: past `idleMs` with no byte
 * while the server is ready for more, it ends in error and `timedOut()` says so; the route answers 408 (issue 39: a
 * `Content-Length` larger than what was sent held the transfer's slot until Node's own 300 s). The time the server
 * itself holds the body back (the container writes slowly: backpressure) does not count. `broken()`: the request
 * itself failed (its connection closed early, a body HTTP could not parse). `release()` hands the request back (the
 * error answer's linger reads what is left).
 */
export function idleLimitedBody(
  req: IncomingMessage,
  idleMs: number,
): { body: PassThrough; timedOut: () => boolean; broken: () => boolean; release: () => void } {
  const body = new PassThrough();
  // Its error (the client gone, the 408) is for whoever reads it: the route may not read yet (it asks the disk for a
  // folder first), and an 'error' with no listener would end the server.
  body.on('error', () => undefined);
  let timer: NodeJS.Timeout | null = null;
  let timedOut = false;
  let broken = false;
  const stop = (): void => {
    if (timer !== null) clearTimeout(timer);
    timer = null;
  };
  const arm = (): void => {
    stop();
    timer = setTimeout(onIdle, idleMs);
  };
  const onData = (chunk: Buffer): void => {
    if (body.write(chunk)) return arm();
    // The server is not ready for more: the client's silence meanwhile is ours, not its.
    stop();
    req.pause();
  };
  const onDrain = (): void => {
    if (req.readableEnded) return;
    req.resume();
    arm();
  };
  const onEnd = (): void => {
    stop();
    body.end();
  };
  const onError = (err: Error): void => {
    stop();
    broken = true;
    body.destroy(err);
  };
  // A connection closed before the body's end: no 'end' comes (and no 'error' on every Node).
  const onClose = (): void => {
    stop();
    if (req.readableEnded) return;
    broken = true;
    body.destroy(new Error('request body ended early'));
  };
  const release = (): void => {
    stop();
    req.off('data', onData);
    req.off('end', onEnd);
    req.off('error', onError);
    req.off('close', onClose);
    body.off('drain', onDrain);
  };
  function onIdle(): void {
    timedOut = true;
    release();
    body.destroy(bodyTimeout(idleMs));
  }
  req.on('data', onData);
  req.once('end', onEnd);
  req.on('error', onError);
  req.once('close', onClose);
  body.on('drain', onDrain);
  if (req.readableEnded) onEnd();
  else arm();
  return { body, timedOut: () => timedOut, broken: () => broken, release };
}
