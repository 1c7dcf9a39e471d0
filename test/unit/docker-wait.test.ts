import Docker from 'dockerode';
import { describe, expect, it } from 'vitest';
import { DockerContainerRuntime } from '../../src/adapters/docker/docker-container-runtime.js';

/** A dockerode stand-in whose wait() fails with the given errors before the container exits with 3. */
function engineWithWaitFailures(failures: Error[]): { docker: Docker; calls: () => number } {
  let calls = 0;
  const docker = Object.create(Docker.prototype) as Docker;
  docker.getContainer = (() => ({
    wait: () => {
      calls++;
      const failure = failures.shift();
      return failure === undefined ? Promise.resolve({ StatusCode: 3 }) : Promise.reject(failure);
    },
  })) as unknown as Docker['getContainer'];
  return { docker, calls: () => calls };
}

describe('DockerContainerRuntime.wait', () => {
  it('waits again after a dropped connection instead of ending a running pair', async () => {
    const reset = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    const engine = engineWithWaitFailures([reset]);
    const result = await new DockerContainerRuntime(engine.docker).wait('c1', { deadlineMs: Date.now() + 10_000 });
    expect(result).toEqual({ kind: 'exited', exitCode: 3 });
    expect(engine.calls()).toBe(2);
  });

  it('reports any other engine error at once', async () => {
    const notFound = Object.assign(new Error('no such container'), { statusCode: 404, json: { message: 'No such container: c1' } });
    const engine = engineWithWaitFailures([notFound]);
    await expect(new DockerContainerRuntime(engine.docker).wait('c1', { deadlineMs: Date.now() + 10_000 })).rejects.toMatchObject({
      code: 'E_ENGINE',
    });
    expect(engine.calls()).toBe(1);
  });

  it('returns "deadline" when the wall budget ends first', async () => {
    const docker = Object.create(Docker.prototype) as Docker;
    docker.getContainer = (() => ({ wait: () => new Promise(() => undefined) })) as unknown as Docker['getContainer'];
    expect(await new DockerContainerRuntime(docker).wait('c1', { deadlineMs: Date.now() + 20 })).toEqual({ kind: 'deadline' });
  });
});
