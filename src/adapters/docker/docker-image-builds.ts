import type { Readable } from 'node:stream';
import type Docker from 'dockerode';
import type { EngineImage, ImageBuildEngine, ImageBuildOptions } from '../../app/ports/image-builds.js';
import type { DockerContainerRuntime } from './docker-container-runtime.js';
import { statusOf, toEngineError } from './engine-error.js';

const CALL_TIMEOUT_MS = 60_000;

interface BuildEvent {
  stream?: string;
  error?: string;
  errorDetail?: { message?: string };
  aux?: { ID?: string };
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

  async findByLabel(key: string, value: string): Promise<string | null> {
    try {
      const images = await this.#docker.listImages({
        filters: { label: [`${key}=${value}`] },
        abortSignal: AbortSignal.timeout(CALL_TIMEOUT_MS),
      } as object);
      return images[0]?.Id ?? null;
    } catch (err) {
      throw toEngineError(err, 'list images');
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
    onLog: (text: string) => void,
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
      // Build errors do not reject: they arrive as `error`/`errorDetail` events in the progress stream.
      await new Promise<void>((resolve, reject) => {
        this.#docker.modem.followProgress(
          stream,
          (err: Error | null) => (err ? reject(err) : resolve()),
          (event: BuildEvent) => {
            if (event.stream !== undefined) onLog(event.stream);
            if (event.aux?.ID !== undefined) id = event.aux.ID;
            if (event.error !== undefined || event.errorDetail !== undefined)
              failure ??= event.errorDetail?.message ?? event.error ?? 'unknown error';
          },
        );
      });
    } catch (err) {
      if (signal.aborted) throw new Error('the build was stopped: the client went away', { cause: err });
      throw toEngineError(err, 'build an image', options.ref);
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
    if (failure !== null) throw new Error(failure);
    const built = id ?? (await this.inspectImage(options.ref))?.id;
    if (built === undefined) throw new Error(`the engine reported no image for ${options.ref}`);
    return { id: built };
  }
}
