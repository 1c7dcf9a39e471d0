import { readFile } from 'node:fs/promises';
import { Readable } from 'node:stream';
import type Docker from 'dockerode';
import { parseEngineEndpoint, type EngineEndpoint } from '../../core/executor.js';
import { Dockerode } from '../docker/dockerode.js';
import { EngineError } from '../../app/ports/engine-error.js';

/** Every manager and node call is bounded: a hung engine must not hang the pair's lifecycle. */
const CALL_TIMEOUT_MS = 60_000;

/** The options of one bounded engine call (dockerode aborts the request at the deadline). */
export function callOptions(): { abortSignal: AbortSignal } {
  return { abortSignal: AbortSignal.timeout(CALL_TIMEOUT_MS) };
}

/** dockerode's promise form of a method whose typings (lagging dockerode 5) only offer the callback overload for our options. */
export function promised(method: unknown): (options: object) => Promise<unknown> {
  return method as (options: object) => Promise<unknown>;
}

/** A log read without `follow` answers the whole (multiplexed) log as one Buffer, not a stream. */
export function asStream(log: unknown): Readable {
  return Buffer.isBuffer(log) ? Readable.from([log]) : (log as Readable);
}

/** dockerode options for an endpoint (TLS files are read here, without blocking: a missing one is a clear error). */
export async function dockerOptionsFor(endpoint: EngineEndpoint): Promise<Docker.DockerOptions> {
  switch (endpoint.kind) {
    case 'unix':
      return { socketPath: endpoint.socketPath };
    case 'tcp': {
      if (endpoint.tls === null) return { host: endpoint.host, port: endpoint.port, protocol: 'http' };
      const [ca, cert, key] = await Promise.all([
        readFile(endpoint.tls.ca),
        readFile(endpoint.tls.cert),
        readFile(endpoint.tls.key),
      ]);
      return { host: endpoint.host, port: endpoint.port, protocol: 'https', ca, cert, key };
    }
    case 'ssh':
      return {
        protocol: 'ssh',
        host: endpoint.host,
        port: endpoint.port,
        ...(endpoint.username !== null ? { username: endpoint.username } : {}),
      };
  }
}

/** A client of the engine at `url` (`unix://`, `tcp://` with or without TLS, `ssh://`). */
export async function connectEngine(url: string): Promise<Docker> {
  const endpoint = parseEngineEndpoint(url);
  if ('problem' in endpoint)
    throw new EngineError('engine_error', `engine endpoint ${url}: ${endpoint.problem}`, {
      statusCode: null,
      engineMessage: endpoint.problem,
    });
  return new Dockerode(await dockerOptionsFor(endpoint));
}
