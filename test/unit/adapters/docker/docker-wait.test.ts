import Docker from 'dockerode';
import { describe, expect, it } from 'vitest';
import { DockerContainerRuntime } from '../../../../src/adapters/docker/docker-container-runtime.js';

const refused = (): Error =>
  Object.assign(new Error('connect ECONNREFUSED /var/run/docker.sock'), { code: 'ECONNREFUSED' });
const state = (status: string) => ({ State: { Status: status } });

/**
 * A dockerode stand-in: wait() fails with the given errors, then (or when none) behaves as `wait`; inspect() answers
 * with `inspect` (a value, an error to reject with, or 'hang').
 */
function engine(options: { waitFailures?: Error[]; wait?: 'hang' | number; inspect?: () => unknown }): {
  docker: Docker;
  waits: () => number;
  inspects: () => number;
} {
  let waits = 0;
  let inspects = 0;
  const docker = Object.create(Docker.prototype) as Docker;
  // dockerode's Container is a class of ~40 methods; the adapter's wait loop calls only these two.
  docker.getContainer = (() => ({
    wait: () => {
      waits++;
      const failure = options.waitFailures?.shift();
      if (failure !== undefined) return Promise.reject(failure);
      return options.wait === 'hang'
        ? new Promise(() => undefined)
        : Promise.resolve({ StatusCode: options.wait ?? 3 });
    },
    inspect: () => {
      inspects++;
      const answer = options.inspect?.() ?? state('running');
      if (answer === 'hang') return new Promise(() => undefined);
      return answer instanceof Error ? Promise.reject(answer) : Promise.resolve(answer);
    },
  })) as unknown as Docker['getContainer'];
  return { docker, waits: () => waits, inspects: () => inspects };
}

const soon = (ms = 10_000): { deadlineMs: number } => ({ deadlineMs: Date.now() + ms });

describe('DockerContainerRuntime.wait', () => {
  it('reports the exit code when the container exits', async () => {
    const e = engine({ wait: 3 });
    expect(await new DockerContainerRuntime(e.docker).wait('c1', soon())).toEqual({
      kind: 'exited',
      exitCode: 3,
    });
  });

  it('a dropped wait connection is reported as engine_lost at once, not waited through to the deadline', async () => {
    const reset = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    const e = engine({ waitFailures: [reset] });
    const before = Date.now();
    const result = await new DockerContainerRuntime(e.docker).wait('c1', soon());
    expect(result).toMatchObject({ kind: 'engine_lost' });
    expect(result.kind === 'engine_lost' && result.lastSeenAliveMs).toBeGreaterThanOrEqual(before);
    expect(e.waits()).toBe(1);
  });

  it('a wait that hangs while the engine is gone (dockerd SIGKILLed) is noticed by the heartbeat inspect', async () => {
    const e = engine({ wait: 'hang', inspect: refused });
    const result = await new DockerContainerRuntime(e.docker, { heartbeatMs: 20 }).wait('c1', soon());
    expect(result).toMatchObject({ kind: 'engine_lost' });
    expect(e.inspects()).toBe(1);
  });

  it('a container that stopped while its wait stays silent (connection cut) is reported as engine_lost', async () => {
    let n = 0;
    const e = engine({ wait: 'hang', inspect: () => (++n < 3 ? state('running') : state('exited')) });
    const result = await new DockerContainerRuntime(e.docker, {
      heartbeatMs: 20,
      silentWaitGraceMs: 50,
    }).wait('c1', soon());
    expect(result).toMatchObject({ kind: 'engine_lost' });
    expect(e.inspects()).toBe(3);
  });

  it('a stopped container whose wait answers within the grace is an ordinary exit (a busy engine, not a lost one)', async () => {
    const docker = Object.create(Docker.prototype) as Docker;
    // A dockerode Container holding only what the wait loop calls (as above).
    docker.getContainer = (() => ({
      wait: () => new Promise((resolve) => setTimeout(() => resolve({ StatusCode: 0 }), 100)),
      inspect: () => Promise.resolve(state('exited')),
    })) as unknown as Docker['getContainer'];
    const rt = new DockerContainerRuntime(docker, { heartbeatMs: 10, silentWaitGraceMs: 1_000 });
    expect(await rt.wait('c1', soon())).toEqual({ kind: 'exited', exitCode: 0 });
  });

  it('a container the engine no longer knows (404 on the heartbeat) is reported as engine_lost', async () => {
    const gone = Object.assign(new Error('no such container'), {
      statusCode: 404,
      json: { message: 'No such container: c1' },
    });
    const e = engine({ wait: 'hang', inspect: () => gone });
    expect(await new DockerContainerRuntime(e.docker, { heartbeatMs: 20 }).wait('c1', soon())).toMatchObject({
      kind: 'engine_lost',
    });
  });

  it('a slow heartbeat answer is not a lost engine: the pair keeps waiting until its deadline', async () => {
    const slow = Object.assign(new Error('The operation was aborted due to timeout'), {
      name: 'TimeoutError',
    });
    const e = engine({ wait: 'hang', inspect: () => slow });
    expect(await new DockerContainerRuntime(e.docker, { heartbeatMs: 20 }).wait('c1', soon(300))).toEqual({
      kind: 'deadline',
    });
    expect(e.inspects()).toBeGreaterThan(1);
  });

  it('reports any other engine error at once', async () => {
    const conflict = Object.assign(new Error('conflict'), { statusCode: 409, json: { message: 'conflict' } });
    const e = engine({ waitFailures: [conflict] });
    await expect(new DockerContainerRuntime(e.docker).wait('c1', soon())).rejects.toMatchObject({
      code: 'E_ENGINE',
    });
    expect(e.waits()).toBe(1);
  });

  it('returns "deadline" when the wall budget ends first', async () => {
    const e = engine({ wait: 'hang' });
    expect(await new DockerContainerRuntime(e.docker).wait('c1', soon(20))).toEqual({ kind: 'deadline' });
  });
});
