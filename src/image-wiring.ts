import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { ImagePulls } from './app/ports/image-pulls.js';
import type { CompressedSize } from './app/batch/start-batch-types.js';
import type { DockerConfigReader } from './app/batch/registry-auth.js';

/**
 * Issue 43's adapters for the composition roots: the engine's image calls (dockerode, loaded on first use like the
 * runtimes), the registry's compressed sizes, and the engine user's `~/.docker/config.json` (`$DOCKER_CONFIG`).
 * `engineUrl`: another engine than the local one (a swarm's manager, or one node's own engine, `--node-engine`).
 */
export function createImagePulls(engineUrl?: string): ImagePulls {
  let real: Promise<ImagePulls> | null = null;
  const get = (): Promise<ImagePulls> =>
    (real ??= (async () => {
      const [{ Dockerode }, { DockerImagePulls }, { connectEngine }] = await Promise.all([
        import('./adapters/docker/dockerode.js'),
        import('./adapters/docker/docker-image-pulls.js'),
        import('./adapters/swarm/swarm-connection.js'),
      ]);
      return new DockerImagePulls(engineUrl === undefined ? new Dockerode() : await connectEngine(engineUrl));
    })());
  // A failed connection (a TLS file missing) is tried again on the next call.
  const retried = (): Promise<ImagePulls> =>
    get().catch((err: unknown) => {
      real = null;
      throw err;
    });
  return {
    distribution: async (ref, auth) => (await retried()).distribution(ref, auth),
    pull: async (ref, auth, onProgress, signal) => (await retried()).pull(ref, auth, onProgress, signal),
    facts: async (ref) => (await retried()).facts(ref),
    remove: async (ref) => (await retried()).remove(ref),
  };
}

/** Issue 43, swarm: each node's image calls on its own engine (`--node-engine NODE=URL`), connected on first use. */
export function createNodeImagePulls(
  nodeEngines: Readonly<Record<string, string>>,
): (node: string) => ImagePulls {
  const made = new Map<string, ImagePulls>();
  return (node) => {
    let pulls = made.get(node);
    if (pulls === undefined) {
      const url = nodeEngines[node];
      if (url === undefined) throw new Error(`no --node-engine for swarm node ${node}`);
      pulls = createImagePulls(url);
      made.set(node, pulls);
    }
    return pulls;
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
