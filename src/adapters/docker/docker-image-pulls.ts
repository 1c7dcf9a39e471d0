import type Docker from 'dockerode';
import type { ImagePulls, PullProgress, RegistryAuth } from '../../app/ports/image-pulls.js';
import { engineMessageOf, statusOf } from './engine-error.js';

/**
 * The image plan's engine calls over dockerode (issue 43). dockerode sends `authconfig` as the base64 JSON of the
 * `X-Registry-Auth` header and nowhere else; errors carry the engine's (the registry's) message, never the header.
 */
export class DockerImagePulls implements ImagePulls {
  readonly #docker: Docker;

  constructor(docker: Docker) {
    this.#docker = docker;
  }

  async distribution(ref: string, auth: RegistryAuth | undefined): Promise<{ readonly digest: string }> {
    const image = this.#docker.getImage(ref);
    try {
      const answer = (await image.distribution(auth !== undefined ? { authconfig: auth } : {})) as {
        Descriptor?: { digest?: unknown };
      };
      const digest = answer.Descriptor?.digest;
      if (typeof digest !== 'string' || !/^sha256:[0-9a-f]{64}$/.test(digest))
        throw new Error(`the engine gave no manifest digest for ${ref}`);
      return { digest };
    } catch (err) {
      throw new Error(engineMessageOf(err), { cause: err });
    }
  }

  async pull(
    ref: string,
    auth: RegistryAuth | undefined,
    onProgress?: (p: PullProgress) => void,
    signal?: AbortSignal,
  ): Promise<void> {
    signal?.throwIfAborted();
    let stream: NodeJS.ReadableStream;
    try {
      stream = await this.#docker.pull(ref, auth !== undefined ? { authconfig: auth } : {});
    } catch (err) {
      throw new Error(engineMessageOf(err), { cause: err });
    }
    // Closing the stream ends the engine's pull (it cancels a pull whose client went away).
    const abort = (): void =>
      (stream as unknown as { destroy?: (e?: Error) => void }).destroy?.(new Error('pull abandoned'));
    signal?.addEventListener('abort', abort, { once: true });
    await new Promise<void>((resolve, reject) => {
      this.#docker.modem.followProgress(
        stream,
        (err: Error | null, lines: readonly { error?: string; errorDetail?: { message?: string } }[]) => {
          if (err !== null) return reject(new Error(engineMessageOf(err)));
          const failed = lines.find((l) => l.error !== undefined || l.errorDetail !== undefined);
          if (failed !== undefined)
            return reject(new Error(failed.errorDetail?.message ?? failed.error ?? 'pull failed'));
          resolve();
        },
        (line: PullProgress) => onProgress?.(line),
      );
    }).finally(() => signal?.removeEventListener('abort', abort));
  }

  async facts(ref: string): Promise<{ readonly id: string; readonly bytes: number } | null> {
    try {
      const info = (await this.#docker.getImage(ref).inspect()) as { Id?: string; Size?: number };
      return { id: info.Id ?? '', bytes: typeof info.Size === 'number' ? info.Size : 0 };
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw new Error(engineMessageOf(err), { cause: err });
    }
  }

  async remove(ref: string): Promise<'removed' | 'absent' | 'in_use'> {
    try {
      await this.#docker.getImage(ref).remove({ noprune: false });
      return 'removed';
    } catch (err) {
      const status = statusOf(err);
      if (status === 404) return 'absent';
      if (status === 409) return 'in_use';
      throw new Error(engineMessageOf(err), { cause: err });
    }
  }
}
