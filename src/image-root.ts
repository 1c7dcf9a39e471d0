/** The wiring of `images build`: the engine checked, then the synthetic images built. */
import { buildSyntheticImages } from './adapters/docker/image-builder.js';
import type { BuildReport } from './core/synthetic-images.js';
import * as root from './composition-root.js';
import * as pkg from './package-root.js';

/** `images build`: the synthetic images of docker/ through dockerode; no engine answering exits 3 before anything. */
export async function buildImages(options: {
  readonly busyboxPath: string;
  readonly force: boolean;
  readonly only?: string[];
}): Promise<BuildReport[]> {
  const runtime = await root.createDockerRuntime();
  await runtime.info(); // fail fast with exit 3 when no engine answers
  return buildSyntheticImages(runtime.docker, { dockerDir: pkg.DOCKER_DIR, ...options });
}
