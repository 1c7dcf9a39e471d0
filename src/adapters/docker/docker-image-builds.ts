import type { Readable } from 'node:stream';
import type Docker from 'dockerode';
import type { EngineImage, ImageBuildEngine, ImageBuildOptions } from '../../app/ports/image-builds.js';
import type { DockerContainerRuntime } from './docker-container-runtime.js';
import { statusOf, toEngineError } from './engine-error.js';
import { InternalError } from '../../core/errors.js';

const CALL_TIMEOUT_MS = 60_000;

export interface BuildEvent {
  stream?: string;
  error?: string;
  errorDetail?: { message?: string };
  aux?: { ID?: string };
}

/**
 * The engine's build output (JSON lines) to `onEvent`, line by line, without keeping it: while a promise `onEvent`
 * returned is pending (a slow reader), the stream is paused. Resolves at its end; rejects on an error or when closed
 * after `signal` aborted.
 */
export function readBuildEvents(
  readable: Readable,
  signal: AbortSignal,
  onEvent: (event: BuildEvent) => Promise<void> | undefined,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let buf = '';
    readable.on('data', (chunk: Buffer | string) => {
      buf += chunk.toString();
      const waits: Promise<void>[] = [];
      let pos: number;
      while ((pos = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, pos).replace(/\r$/, '');
        buf = buf.slice(pos + 1);
        if (line.length === 0) continue;
        let event: BuildEvent;
        try {
          event = JSON.parse(line) as BuildEvent;
        } catch {
          continue;
        }
        const wait = onEvent(event);
        if (wait !== undefined) waits.push(wait);
      }
      if (waits.length > 0) {
        readable.pause();
        void Promise.all(waits).then(() => readable.resume());
      }
    });
    readable.once('error', reject);
    readable.once('end', () => resolve());
    readable.once('close', () => (signal.aborted ? reject(new InternalError('aborted')) : resolve()));
  });
}

/** ImageBuildEngine over dockerode (the engine's legacy builder: a tar context, no pulls of missing bases asked). */
export class DockerImageBuilds implements ImageBuildEngine {
  readonly #docker: Docker;
  readonly #runtime: DockerContainerRuntime;

  constructor(runtime: DockerContainerRuntime) {
    this.#runtime = runtime;
    this.#docker = runtime.docker;
  }

  async inspectImage(ref: string): Promise<EngineImage | null> {
    try {
      const image = await this.#docker
        .getImage(ref)
        .inspect({ abortSignal: AbortSignal.timeout(CALL_TIMEOUT_MS) } as object);
      return { id: image.Id, labels: image.Config?.Labels ?? {} };
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw toEngineError(err, 'inspect an image', ref);
    }
  }

  async tag(id: string, ref: string): Promise<void> {
    const colon = ref.lastIndexOf(':');
    try {
      await this.#docker.getImage(id).tag({ repo: ref.slice(0, colon), tag: ref.slice(colon + 1) });
    } catch (err) {
      throw toEngineError(err, 'tag an image', ref);
    }
  }

  networkMode(choice: 'none' | 'bridge'): Promise<string> {
    return this.#runtime.networkMode(choice);
  }

  async build(
    context: Readable,
    options: ImageBuildOptions,
    onLog: (text: string) => Promise<void> | undefined,
    signal: AbortSignal,
  ): Promise<{ id: string }> {
    let stream: NodeJS.ReadableStream;
    try {
      stream = await this.#docker.buildImage(context, {
        t: options.ref,
        dockerfile: options.dockerfile,
        labels: { ...options.labels },
        rm: true,
        forcerm: true,
        pull: false,
        networkmode: options.networkMode,
        memory: options.memoryBytes,
        memswap: options.memoryBytes,
        abortSignal: signal,
      } as Docker.ImageBuildOptions);
    } catch (err) {
      throw toEngineError(err, 'build an image', options.ref);
    }
    const onAbort = (): void => {
      (stream as unknown as Readable).destroy();
    };
    signal.addEventListener('abort', onAbort, { once: true });
    let failure: string | null = null;
    let id: string | null = null;
    try {
      // Build errors do not reject: they arrive as `error`/`errorDetail` events in the progress stream. Read line by
      // line here (not modem.followProgress, which keeps every event in memory), pausing the engine's stream while
      // `onLog` waits for a slow reader.
      await readBuildEvents(stream as unknown as Readable, signal, (event) => {
        if (event.aux?.ID !== undefined) id = event.aux.ID;
        if (event.error !== undefined || event.errorDetail !== undefined)
          failure ??= event.errorDetail?.message ?? event.error ?? 'unknown error';
        return event.stream !== undefined ? (onLog(event.stream) ?? undefined) : undefined;
      });
    } catch (err) {
      if (signal.aborted)
        throw new InternalError('the build was stopped: the client went away', { cause: err });
      throw toEngineError(err, 'build an image', options.ref);
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
    if (failure !== null) throw new InternalError(failure);
    const built = id ?? (await this.inspectImage(options.ref))?.id;
    if (built === undefined) throw new InternalError(`the engine reported no image for ${options.ref}`);
    return { id: built };
  }
}
