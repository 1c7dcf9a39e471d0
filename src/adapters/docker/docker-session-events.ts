// The engine's event stream, narrowed to the end of this server's session containers (issue 39).
import type { Readable } from 'node:stream';
import type Docker from 'dockerode';
import type { Logger } from '../../app/ports/logger.js';
import type { ContainerEndEvent } from '../../app/ports/container-runtime.js';

/** Wait before subscribing again after the stream ended or failed (an engine restart). */
const RESUBSCRIBE_MS = 1_000;

interface EngineEvent {
  readonly Type?: string;
  readonly Action?: string;
  readonly Actor?: { readonly ID?: string; readonly Attributes?: Readonly<Record<string, string>> };
  readonly time?: number;
}

/** A container event of ours as the session manager takes it, or null (another kind, another action). */
export function containerEndOf(event: EngineEvent): ContainerEndEvent | null {
  if (event.Type !== 'container' || (event.Action !== 'die' && event.Action !== 'destroy')) return null;
  const attributes = event.Actor?.Attributes ?? {};
  const sessionId = attributes['roboguide.job'];
  const containerId = event.Actor?.ID;
  if (sessionId === undefined || containerId === undefined) return null;
  const code = Number(attributes['exitCode']);
  return {
    sessionId,
    containerId,
    action: event.Action,
    exitCode: event.Action === 'die' && Number.isInteger(code) ? code : null,
  };
}

/**
 * Follows the engine's `die` and `destroy` events of containers labelled `roboguide.serve=session` and
 * `roboguide.batch=<batchId>` and hands each to `onEnd`. A stream that ends or fails (the engine restarted) is
 * opened again with `since` at the last event seen, so nothing in between is missed (events from `sinceMs` on are
 * replayed first: those of an adoption that ran before). `close()` stops it.
 */
export function watchSessionContainers(
  docker: Docker,
  batchId: string,
  onEnd: (event: ContainerEndEvent) => void,
  logger: Logger,
  sinceMs = Date.now(),
): { close(): void } {
  let closed = false;
  let current: Readable | null = null;
  let since = Math.floor(sinceMs / 1000);
  let retry: NodeJS.Timeout | null = null;
  const filters = {
    type: ['container'],
    event: ['die', 'destroy'],
    label: [`roboguide.batch=${batchId}`, 'roboguide.serve=session'],
  };
  const again = (): void => {
    current = null;
    if (closed) return;
    retry = setTimeout(() => void subscribe(), RESUBSCRIBE_MS);
    retry.unref();
  };
  const subscribe = async (): Promise<void> => {
    let stream: Readable;
    try {
      stream = (await docker.getEvents({ since, filters } as Docker.GetEventsOptions)) as unknown as Readable;
    } catch (err) {
      logger.warn({ error: (err as Error).message }, 'engine events: cannot subscribe; retrying');
      again();
      return;
    }
    if (closed) {
      stream.destroy();
      return;
    }
    current = stream;
    let pending = '';
    stream.on('data', (chunk: Buffer) => {
      pending += chunk.toString('utf8');
      let newline = pending.indexOf('\n');
      while (newline >= 0) {
        const line = pending.slice(0, newline).trim();
        pending = pending.slice(newline + 1);
        newline = pending.indexOf('\n');
        if (line === '') continue;
        let event: EngineEvent;
        try {
          event = JSON.parse(line) as EngineEvent;
        } catch {
          continue;
        }
        if (typeof event.time === 'number') since = Math.max(since, event.time);
        const end = containerEndOf(event);
        if (end !== null) onEnd(end);
      }
    });
    stream.once('error', () => stream.destroy());
    stream.once('close', again);
  };
  void subscribe();
  return {
    close: () => {
      closed = true;
      if (retry !== null) clearTimeout(retry);
      current?.destroy();
    },
  };
}
