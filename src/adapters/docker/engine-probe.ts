import { access } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { ContainerState, ContainerStatus, EngineInfo } from '../../app/ports/container-runtime.js';
import type { EngineRuntime } from '../../core/oci-runtime.js';
import { toEngineError } from './engine-error.js';
import { ENGINE_FACTS_REUSE_MS } from './engine-facts.js';
import { socketGet } from './socket-get.js';

/**
 * The engine's unix socket exactly as dockerode (docker-modem) picks it: DOCKER_HOST `unix://PATH`, or when
 * DOCKER_HOST is unset or empty (or `unix://` without a path) `~/.docker/run/docker.sock` if it is there, else
 * `/var/run/docker.sock`. Null for every other transport (tcp, TLS, ssh, npipe): those are dockerode's alone.
 */
export async function engineUnixSocket(
  env: Readonly<Record<string, string | undefined>> = process.env,
): Promise<string | null> {
  if (process.platform === 'win32') return null;
  const host = env['DOCKER_HOST'];
  if (host !== undefined && host !== '' && !host.startsWith('unix://')) return null;
  const explicit = host?.slice('unix://'.length) ?? '';
  if (explicit !== '') return explicit;
  const user = join(homedir(), '.docker', 'run', 'docker.sock');
  try {
    await access(user);
    return user;
  } catch {
    return '/var/run/docker.sock';
  }
}

/** How long a short engine call may take (inspect, create, remove, the facts): DockerContainerRuntime's default. */
export const DEFAULT_ENGINE_CALL_TIMEOUT_MS = 60_000;

/** The engine's facts asked on its unix socket before its client was built (issue 39), and when they were asked. */
export interface EarlyEngineFacts {
  readonly socketPath: string;
  readonly atMs: number;
  readonly answer: Promise<[InfoBody, VersionBody]>;
}

const PREFETCHED = Symbol.for('roboguide-eval.engine-facts');
/** A connection's errors that mean nothing listened on the socket then: the prefetched facts are asked again. */
const NOT_LISTENING: ReadonlySet<string> = new Set(['ENOENT', 'ECONNREFUSED']);

/** Facts asked at the process's start: until taken, their connections keep nothing alive (the command may fail first). */
interface Prefetched extends EarlyEngineFacts {
  /** Taken: its connections, and any it makes next, keep the process alive until answered. */
  readonly hold: () => void;
}

/**
 * The engine's facts (probeEngineFacts) asked now on the socket docker-modem will pick (engineUnixSocket), for the
 * runtime built once dockerode has loaded to take (about 45 ms of loading, while the engine answers). Null when the
 * engine is not on a unix socket. Never rejects; a failed answer is the first `info`'s failure. Facts bin/run.js
 * asked at the process's start (prefetchEngineFacts) are taken instead, once, when asked on the same socket under
 * ENGINE_FACTS_REUSE_MS ago (the runtime's own rule for early facts); asked again when nothing listened then.
 */
export async function askEngineFactsEarly(
  env: Readonly<Record<string, string | undefined>> = process.env,
): Promise<EarlyEngineFacts | null> {
  const socketPath = await engineUnixSocket(env);
  if (socketPath === null) return null;
  const prefetched = takePrefetched(socketPath);
  if (prefetched !== null) return prefetched;
  const answer = probeEngineFacts(socketPath, DEFAULT_ENGINE_CALL_TIMEOUT_MS);
  answer.catch(() => undefined); // taken (and reported) by the runtime's first info, or by nobody
  return { socketPath, atMs: performance.now(), answer };
}

/**
 * The engine's facts asked at once, before the command is even loaded (bin/run.js, for `pair run`: issue 39): the
 * engine's `info` takes it 30 to 50 ms, which a `pair run` waited out between reading its spec and checking it
 * against the engine. Kept for askEngineFactsEarly under a well-known symbol (bin/run.js loads this module from the
 * bundle's own entry); nothing when the engine is not on a unix socket. Never throws or rejects.
 */
export async function prefetchEngineFacts(
  env: Readonly<Record<string, string | undefined>> = process.env,
): Promise<void> {
  const slot = globalThis as { [PREFETCHED]?: Prefetched };
  if (slot[PREFETCHED] !== undefined) return;
  try {
    const socketPath = await engineUnixSocket(env);
    if (socketPath === null) return;
    let held = false;
    const sockets: Socket[] = [];
    const answer = probeEngineFacts(socketPath, DEFAULT_ENGINE_CALL_TIMEOUT_MS, (socket) => {
      if (held) return;
      socket.unref();
      sockets.push(socket);
    });
    answer.catch(() => undefined); // taken by askEngineFactsEarly, or by nobody
    const hold = (): void => {
      held = true;
      for (const socket of sockets.splice(0)) socket.ref();
    };
    slot[PREFETCHED] = { socketPath, atMs: performance.now(), answer, hold };
  } catch {
    // asked again by the runtime
  }
}

/** The prefetched facts, once, when asked on `socketPath` recently enough; a failed answer is asked again. */
function takePrefetched(socketPath: string): EarlyEngineFacts | null {
  const slot = globalThis as { [PREFETCHED]?: Prefetched };
  const early = slot[PREFETCHED];
  if (early === undefined) return null;
  delete slot[PREFETCHED];
  if (early.socketPath !== socketPath || performance.now() - early.atMs >= ENGINE_FACTS_REUSE_MS) return null;
  early.hold();
  // No engine on the socket at the process's start (not yet started, restarting): asked again. Any other failure (no
  // answer within the deadline, an error status) is the first `info`'s, as it would have been.
  const answer = early.answer.catch((err: unknown) => {
    if (!NOT_LISTENING.has((err as NodeJS.ErrnoException | null)?.code ?? '')) throw err;
    return probeEngineFacts(socketPath, DEFAULT_ENGINE_CALL_TIMEOUT_MS);
  });
  answer.catch(() => undefined);
  return { socketPath, atMs: early.atMs, answer };
}

/** The version endpoint's answer, as much as we read of it. */
export interface VersionBody {
  readonly Version: string;
  readonly ApiVersion: string;
  readonly Components?: readonly { readonly Name?: string; readonly Version?: string }[] | null;
}

/**
 * Which engine serves the Docker API, from the version endpoint's Components: Podman names itself "Podman Engine"
 * there (and its own version), Docker "Engine". Anything else is taken for Docker.
 */
export function engineProductOf(version: VersionBody): { product: 'docker' | 'podman'; version: string } {
  const podman = (version.Components ?? []).find((c) => /^podman( engine)?$/i.test(c.Name ?? ''));
  if (podman !== undefined) return { product: 'podman', version: podman.Version ?? version.Version };
  return { product: 'docker', version: version.Version };
}

/** The info endpoint's answer, as much as we read of it. */
export interface InfoBody {
  readonly ID?: string;
  /** The engine's own version (Docker's, or Podman's behind its Docker API): what `version` calls `Version`. */
  readonly ServerVersion?: string;
  readonly Runtimes?: Record<string, unknown>;
  readonly LoggingDriver?: string;
  readonly DockerRootDir?: string;
  readonly SecurityOptions?: readonly string[] | null;
}

/** EngineInfo from the info and version endpoints' answers. */
export function engineInfoOf(info: InfoBody, version: VersionBody): EngineInfo {
  return {
    id: info.ID ?? '',
    ...engineProductOf(version),
    apiVersion: version.ApiVersion,
    runtimes: info.Runtimes ? Object.keys(info.Runtimes) : [],
    runtimeDetails: engineRuntimesOf(info.Runtimes),
    loggingDriver: info.LoggingDriver,
    dataRoot: info.DockerRootDir,
    securityOptions: info.SecurityOptions ?? undefined,
  };
}

/** One GET on the engine's socket; a non-2xx answer rejects like dockerode does (statusCode, json). */
async function getJson(
  socketPath: string,
  path: string,
  timeoutMs?: number,
  onSocket?: (socket: Socket) => void,
): Promise<unknown> {
  const { status, body } = await socketGet(socketPath, path, timeoutMs, onSocket);
  return jsonAnswer(status, body);
}

/**
 * The engine's `info` and what its `version` would say, from one request over its unix socket (issue 39). `version`
 * costs Docker as much as `info` (each runs `runc --version` and `docker-init --version`: about 20 ms of the engine's
 * CPU, measured on 20.10), and all we read of it every answer already carries: the API version in the `Api-Version`
 * header, the engine's version in info's `ServerVersion`, and Podman by its `Libpod-Api-Version` header (both engines
 * set these on every answer of their Docker API). An answer without them (an engine we do not know) asks `version`.
 */
export async function probeEngineFacts(
  socketPath: string,
  timeoutMs?: number,
  onSocket?: (socket: Socket) => void,
): Promise<[InfoBody, VersionBody]> {
  const { status, headers, body } = await socketGet(socketPath, '/info', timeoutMs, onSocket);
  const info = jsonAnswer(status, body) as InfoBody;
  const version = versionOfInfo(info, headers);
  return [info, version ?? ((await getJson(socketPath, '/version', timeoutMs, onSocket)) as VersionBody)];
}

/** `version`'s answer as far as we read it, from info's body and headers; null when they do not say it all. */
export function versionOfInfo(info: InfoBody, headers: ReadonlyMap<string, string>): VersionBody | null {
  const api = headers.get('api-version');
  const version = info.ServerVersion;
  if (api === undefined || api === '' || typeof version !== 'string' || version === '') return null;
  const podman = headers.get('libpod-api-version') !== undefined;
  return {
    Version: version,
    ApiVersion: api,
    Components: [{ Name: podman ? 'Podman Engine' : 'Engine', Version: version }],
  };
}

/** A JSON object answered 2xx, or an error like dockerode's (statusCode, json). */
function jsonAnswer(status: number, body: Buffer): unknown {
  const text = body.toString('utf8');
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    // not JSON: an error below
  }
  if (status >= 200 && status < 300 && typeof json === 'object' && json !== null) return json;
  throw Object.assign(new Error(`(HTTP code ${status}) ${text.trim()}`), { statusCode: status, json });
}

/** `docker info` Runtimes as names with their binary and arguments. */
export function engineRuntimesOf(runtimes: Record<string, unknown> | undefined): EngineRuntime[] {
  return Object.entries(runtimes ?? {}).map(([name, value]) => {
    const v = (value ?? {}) as { path?: unknown; runtimeArgs?: unknown };
    const args = Array.isArray(v.runtimeArgs)
      ? v.runtimeArgs.filter((a): a is string => typeof a === 'string')
      : [];
    return { name, path: typeof v.path === 'string' ? v.path : '', args };
  });
}

/** What the engine's container list says of one container, as much as we read of it. */
export interface ListedContainer {
  readonly Id: string;
  readonly State: string;
  readonly Labels?: Record<string, string> | null;
}

/** A container's state from a list: id, state and labels (nothing else is known from a list). */
export function listedStateOf(c: ListedContainer): ContainerState {
  return {
    id: c.Id,
    status: c.State as ContainerStatus,
    exitCode: null,
    oomKilled: false,
    startedAt: null,
    finishedAt: null,
    labels: c.Labels ?? {},
  };
}

/**
 * `docker ps -a --filter label=…` straight over the engine's unix socket: the same states DockerContainerRuntime
 * .listByLabel gives (id, state, labels; nothing else is known from a list). For `e1-batch status`'s fast path,
 * which answers without loading dockerode.
 */
export async function probeContainersByLabel(
  socketPath: string,
  labels: Readonly<Record<string, string>>,
  timeoutMs?: number,
): Promise<ContainerState[]> {
  const filters = JSON.stringify({
    label: Object.entries(labels).map(([k, v]) => (v === '' ? k : `${k}=${v}`)),
  });
  try {
    const list = (await getJson(
      socketPath,
      `/containers/json?all=1&filters=${encodeURIComponent(filters)}`,
      timeoutMs,
    )) as ListedContainer[];
    return list.map(listedStateOf);
  } catch (err) {
    throw toEngineError(err, 'list containers');
  }
}

/** `docker image inspect IMAGE`'s id over the unix socket, null when the engine has no such image (404). */
export async function probeImageId(
  socketPath: string,
  image: string,
  timeoutMs?: number,
): Promise<string | null> {
  try {
    const info = (await getJson(socketPath, `/images/${encodeURI(image)}/json`, timeoutMs)) as {
      Id?: string;
    };
    return info.Id ?? null;
  } catch (err) {
    if ((err as { statusCode?: unknown }).statusCode === 404) return null;
    throw toEngineError(err, 'inspect an image', image);
  }
}
