import type { TestProject } from 'vitest/node';
import { DockerContainerRuntime } from '../../src/adapters/docker/docker-container-runtime.js';
import { buildSyntheticImages } from '../../src/adapters/docker/image-builder.js';

declare module 'vitest' {
  export interface ProvidedContext {
    dockerAvailable: boolean;
    dockerSkipReason: string;
  }
}

/**
 * Integration suite set-up: find the engine and make sure the synthetic images exist. Locally a missing engine
 * makes the integration tests skip visibly; with REQUIRE_DOCKER=1 (CI) it is a failure.
 */
export default async function setup(project: TestProject): Promise<void> {
  const runtime = new DockerContainerRuntime();
  let available = false;
  let reason = '';
  try {
    await runtime.info();
    available = true;
  } catch (err) {
    reason = `no Docker engine answers (${(err as Error).message})`;
  }
  if (!available && process.env['REQUIRE_DOCKER'] === '1') {
    throw new Error(`REQUIRE_DOCKER=1 but ${reason}`);
  }
  if (available) {
    await buildSyntheticImages(runtime.docker, { dockerDir: new URL('../../docker', import.meta.url).pathname, busyboxPath: '/bin/busybox' });
  } else {
    console.warn(`\n*** integration tests SKIPPED: ${reason} ***\n`);
  }
  project.provide('dockerAvailable', available);
  project.provide('dockerSkipReason', reason);
}
