import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { ImagePulls } from './app/ports/image-pulls.js';
import type { CompressedSize } from './app/batch/start-batch-types.js';
import type { DockerConfigReader } from './app/batch/registry-auth.js';

/**
 * Issue 43's adapters for the composition roots: the engine's image calls (dockerode, loaded on first use like the
 * runtimes), the registry's compressed sizes, and the engine user's `~/.docker/config.json` (`$DOCKER_CONFIG`).
 */
export function createImagePulls(): ImagePulls {
  let real: Promise<ImagePulls> | null = null;
  const get = (): Promise<ImagePulls> =>
    (real ??= (async () => {
      const [{ Dockerode }, { DockerImagePulls }] = await Promise.all([
        import('./adapters/docker/dockerode.js'),
        import('./adapters/docker/docker-image-pulls.js'),
      ]);
      return new DockerImagePulls(new Dockerode());
    })());
  return {
    distribution: async (ref, auth) => (await get()).distribution(ref, auth),
    pull: async (ref, auth, onProgress, signal) => (await get()).pull(ref, auth, onProgress, signal),
    facts: async (ref) => (await get()).facts(ref),
    remove: async (ref) => (await get()).remove(ref),
  };
}

export const registryCompressedSize: CompressedSize = async (image, digest, auth) => {
  const { compressedBytes } = await import('./adapters/registry/manifest-size.js');
  return compressedBytes(image, digest, auth);
};

export const readDockerConfig: DockerConfigReader = async () => {
  const dir = process.env['DOCKER_CONFIG'] ?? join(homedir(), '.docker');
  try {
    return await readFile(join(dir, 'config.json'), 'utf8');
  } catch {
    return null;
  }
};
