import type { IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';
import type Docker from 'dockerode';
import type { ContainerState, ContainerStatus } from '../../app/ports/container-runtime.js';
import { statusOf, toEngineError } from './engine-error.js';

/** Events dockerd keeps in memory (moby's eventsLimit): a replay this long may have lost its oldest. */
const ENGINE_EVENT_BUFFER = 256;

/** The engine's inspect of a container (`size`: with its writable layer's size); null on 404. */
export async function inspectOr404<T = Docker.ContainerInspectInfo>(
  docker: Docker,
  id: string,
  abortSignal: AbortSignal,
  options: { readonly size?: boolean } = {},
  action = 'inspect a container',
): Promise<T | null> {
  try {
    return (await docker.getContainer(id).inspect({ ...options, abortSignal } as object)) as T;
  } catch (err) {
    if (statusOf(err) === 404) return null;
    throw toEngineError(err, action);
  }
}

/**
 * A container's changes list (`GET /containers/{id}/changes`), read as a stream within `maxBytes` (a
 * hostile pair's layer of millions of files makes a huge list): past it, an error. The caller maps errors.
 */
export async function changesList(
  docker: Docker,
  id: string,
  abortSignal: AbortSignal,
  maxBytes: number,
): Promise<{ Path: string }[] | null> {
  const stream = await new Promise<Readable>((resolve, reject) => {
    docker.modem.dial(
      {
        path: `/containers/${encodeURIComponent(id)}/changes`,
        method: 'GET',
        isStream: true,
        abortSignal,
        statusCodes: { 200: true, 404: 'no such container', 500: 'server error' },
      },
      (err: Error | null, data: unknown) => (err ? reject(err) : resolve(data as Readable)),
    );
  });
  const chunks: Buffer[] = [];
  let bytes = 0;
  try {
    for await (const chunk of stream) {
      bytes += (chunk as Buffer).length;
      if (bytes > maxBytes) throw new Error(`the changes list is over ${maxBytes} bytes`);
      chunks.push(chunk as Buffer);
    }
  } finally {
    stream.destroy();
  }
  return JSON.parse(Buffer.concat(chunks).toString('utf8')) as { Path: string }[] | null;
}

/** The buffered engine events of one container since `sinceMs` (ContainerRuntime.containerEventsSince). */
export async function containerEvents(
  docker: Docker,
  id: string,
  sinceMs: number,
  abortSignal: AbortSignal,
): Promise<{ actions: readonly string[]; complete: boolean }> {
  // With `until` the engine replays what it buffered and ends the stream. Unfiltered, to count the buffer.
  const stream = (await docker.getEvents({
    since: Math.floor(sinceMs / 1000),
    until: Math.ceil(Date.now() / 1000),
    abortSignal,
  } as Docker.GetEventsOptions)) as unknown as Readable;
  let text = '';
  for await (const chunk of stream) text += String(chunk);
  const events = text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line) as { Type?: string; Action?: string; Actor?: { ID?: string } });
  const actions = events
    .filter((e) => e.Type === 'container' && e.Actor?.ID === id && typeof e.Action === 'string')
    .map((e) => e.Action as string);
  // Oldest events are dropped first: fewer than a full buffer since `sinceMs` means none was dropped.
  return { actions, complete: events.length < ENGINE_EVENT_BUFFER };
}

/** A container's state from its inspect (a zero time, `0001-…`, is no time). */
export function containerStateOf(c: Docker.ContainerInspectInfo): ContainerState {
  return {
    id: c.Id,
    status: c.State.Status as ContainerStatus,
    exitCode: c.State.Status === 'exited' || c.State.Status === 'dead' ? c.State.ExitCode : null,
    oomKilled: c.State.OOMKilled,
    startedAt: c.State.StartedAt && !c.State.StartedAt.startsWith('0001') ? c.State.StartedAt : null,
    finishedAt: c.State.FinishedAt && !c.State.FinishedAt.startsWith('0001') ? c.State.FinishedAt : null,
    labels: c.Config.Labels ?? {},
  };
}

/**
 * No symbolic link on the way to the absolute `path` in the container: each component's stat as `docker cp` sees it
 * (`HEAD …/archive`, the last component not followed). A 404 is a missing path or a missing container: only the
 * first (`exists`) leaves nothing that could be a link. Any other failure, or a stat it cannot read: false.
 */
export async function linkFreePathOf(
  docker: Docker,
  id: string,
  path: string,
  engine: { readonly deadline: () => { abortSignal: AbortSignal }; readonly exists: () => Promise<boolean> },
): Promise<boolean> {
  const parts = path.split('/').filter((part) => part !== '' && part !== '.');
  if (!path.startsWith('/') || parts.includes('..')) return false;
  let at = '';
  for (const part of parts) {
    at += `/${part}`;
    let stat: string | undefined;
    try {
      const answer = (await docker
        .getContainer(id)
        .infoArchive({ path: at, ...engine.deadline() })) as IncomingMessage;
      answer.resume();
      const header = answer.headers['x-docker-container-path-stat'];
      stat = typeof header === 'string' ? header : undefined;
    } catch (err) {
      if (statusOf(err) === 404) return engine.exists();
      return false;
    }
    if (stat === undefined || isLink(stat, at)) return false;
  }
  return true;
}

/** Go's os.ModeSymlink, a bit of the mode in the engine's path stat. */
const MODE_SYMLINK = 2 ** 27;

/**
 * Whether the path stat of `path` (`X-Docker-Container-Path-Stat`, base64 JSON) says it is a symbolic link, or
 * reached through one: the mode's link bit, or a `linkTarget` other than the path itself (Docker gives "" for a
 * path that is no link, Podman the path it resolved, which differs when a link was on the way). Unreadable: a link.
 */
function isLink(header: string, path: string): boolean {
  try {
    const { mode, linkTarget } = JSON.parse(Buffer.from(header, 'base64').toString('utf8')) as {
      mode?: unknown;
      linkTarget?: unknown;
    };
    if (typeof mode !== 'number') return true;
    if (Math.floor(mode / MODE_SYMLINK) % 2 === 1) return true;
    return typeof linkTarget === 'string' && linkTarget !== '' && linkTarget !== path;
  } catch {
    return true;
  }
}
