import { describe, expect, it } from 'vitest';
import { Dockerode } from '../../src/adapters/docker/dockerode.js';
import { DockerContainerRuntime } from '../../src/adapters/docker/docker-container-runtime.js';
import { engineInfoOf, type InfoBody } from '../../src/adapters/docker/engine-probe.js';
import { engineIsPodman, noDocker } from '../support/docker.js';

/**
 * The engine's facts from one `info` over its unix socket (issue 39: `version` costs Docker as much CPU as `info`), on
 * the real engine (Docker, or Podman in the Podman set): the same as dockerode's `info` and `version` together.
 */
describe.skipIf(noDocker)('the engine facts of one info request, on the real engine', () => {
  it('equal what info and version answer together', async () => {
    const docker = new Dockerode();
    const expected = engineInfoOf((await docker.info()) as InfoBody, await docker.version());
    const facts = await new DockerContainerRuntime(docker).info();
    // Podman makes up a new ID for every answer of its info (measured with 4.3): compared on Docker only.
    const { id, ...rest } = facts;
    const { id: expectedId, ...expectedRest } = expected;
    expect(rest).toEqual(expectedRest);
    expect(id).not.toBe('');
    if (!engineIsPodman) expect(id).toBe(expectedId);
    expect(facts.product).toBe(engineIsPodman ? 'podman' : 'docker');
    expect(facts.apiVersion).toMatch(/^1\.\d+$/);
    expect(facts.version).not.toBe('');
  });
});
