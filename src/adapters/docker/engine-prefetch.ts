import type { Socket } from 'node:net';
import { engineUnixSocket } from './engine-probe.js';
import { socketGet } from './socket-get.js';

/*
 * The engine's `info` and `version`, asked by the launcher (bin/run.js) for `pair run` before it loads the CLI, so
 * that the engine answers while oclif, zod and the command load (about 0.3 s on the 2-core machine) instead of
 * after. The command's first engine call (DockerContainerRuntime.info) takes these answers once, when they came from
 * the same socket it talks to; in every other case (another engine, a failed or late answer) it asks the engine
 * itself as before, so an error is still dockerode's own and reported as ever.
 *
 * The launcher and the bundled command load this module as two copies: they meet on a global symbol. The sockets are
 * unref'd until taken, so a command that never asks (an invalid spec, --help) exits without waiting for them.
 */

const KEY = Symbol.for('roboguide-eval.engine-prefetch');
/** An answer this old is not taken (the command asks the engine again). */
export const PREFETCH_MAX_AGE_MS = 10_000;
/** The prefetch gives up on an engine that has not answered within this long; the command then asks it itself. */
const PREFETCH_TIMEOUT_MS = 10_000;

/** The engine's info and version bodies, parsed. */
export interface PrefetchedFacts {
  readonly info: Record<string, unknown>;
  readonly version: Record<string, unknown> & { readonly Version: string; readonly ApiVersion: string };
}

interface Prefetch {
  readonly socketPath: Promise<string | null>;
  readonly startedAtMs: number;
  readonly facts: Promise<PrefetchedFacts | null>;
  readonly sockets: Socket[];
}

type Holder = { [KEY]?: Prefetch };

/** Starts asking (nothing awaited, nothing thrown): for the unix socket dockerode would use, else nothing. */
export function prefetchEngineFacts(env: Readonly<Record<string, string | undefined>> = process.env): void {
  const sockets: Socket[] = [];
  const hold = (socket: Socket): void => {
    socket.unref();
    sockets.push(socket);
  };
  const socketPath = engineUnixSocket(env).catch(() => null);
  const facts = socketPath.then(async (path) => {
    if (path === null) return null;
    const [info, version] = await Promise.all([
      jsonObject(path, '/info', hold),
      jsonObject(path, '/version', hold),
    ]);
    if (info === null || version === null) return null;
    if (typeof version['Version'] !== 'string' || typeof version['ApiVersion'] !== 'string') return null;
    return { info, version: version as PrefetchedFacts['version'] };
  });
  (globalThis as Holder)[KEY] = { socketPath, startedAtMs: Date.now(), facts, sockets };
}

/**
 * The prefetched answers for the engine at `socketPath`, once (the prefetch is forgotten whether it matches or not);
 * null when there was none, it is for another socket or older than PREFETCH_MAX_AGE_MS, or it failed.
 */
export async function takePrefetchedFacts(socketPath: string | undefined): Promise<PrefetchedFacts | null> {
  const holder = globalThis as Holder;
  const prefetch = holder[KEY];
  if (prefetch === undefined) return null;
  delete holder[KEY];
  if (socketPath === undefined || Date.now() - prefetch.startedAtMs > PREFETCH_MAX_AGE_MS) return null;
  if ((await prefetch.socketPath) !== socketPath) return null;
  // Waited on now: the answers keep the process alive like any call of the command's own, and like dockerode's
  // they get no timeout of their own (a slow engine is not then asked a second time, 10 s later).
  for (const socket of prefetch.sockets) {
    socket.ref();
    socket.setTimeout(0);
  }
  return prefetch.facts;
}

async function jsonObject(
  socketPath: string,
  path: string,
  hold: (socket: Socket) => void,
): Promise<Record<string, unknown> | null> {
  try {
    const { status, body } = await socketGet(socketPath, path, PREFETCH_TIMEOUT_MS, hold);
    if (status !== 200) return null;
    const json: unknown = JSON.parse(body.toString('utf8'));
    return typeof json === 'object' && json !== null && !Array.isArray(json)
      ? (json as Record<string, unknown>)
      : null;
  } catch {
    return null;
  }
}
