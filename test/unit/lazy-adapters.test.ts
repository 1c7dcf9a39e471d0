import { describe, expect, it } from 'vitest';
import { LazyContainerRuntime } from '../../src/adapters/docker/lazy-container-runtime.js';
import type { ContainerRuntime } from '../../src/app/ports/container-runtime.js';

/** A runtime whose every method records its call; only the ones a test uses answer. Not a thenable. */
function fakeRuntime(calls: string[]): ContainerRuntime {
  return new Proxy({} as ContainerRuntime, {
    get: (_target, name: string) =>
      name === 'then'
        ? undefined
        : (...args: unknown[]) => {
            calls.push(`${name}(${args.map((a) => JSON.stringify(a)).join(',')})`);
            if (name === 'info')
              return Promise.resolve({ id: 'engine', version: '1', apiVersion: '1.0', runtimes: [] });
            if (name === 'imageExists') return Promise.resolve(args[0] === 'present:1');
            if (name === 'remove') return Promise.reject(new Error('engine says no'));
            return Promise.resolve(null);
          },
  });
}

describe('LazyContainerRuntime', () => {
  it('builds the runtime on the first engine call, once, and forwards every call with its arguments', async () => {
    const calls: string[] = [];
    let built = 0;
    const lazy = new LazyContainerRuntime(() => {
      built += 1;
      return Promise.resolve(fakeRuntime(calls));
    });
    expect(built).toBe(0);
    const [info, present, missing] = await Promise.all([
      lazy.info(),
      lazy.imageExists('present:1'),
      lazy.imageExists('absent:1'),
    ]);
    expect(built).toBe(1);
    expect(info.id).toBe('engine');
    expect([present, missing]).toEqual([true, false]);
    await lazy.stop('c1', 7);
    await lazy.containerEventsSince('c1', 42);
    await expect(lazy.remove('c1')).rejects.toThrow('engine says no');
    expect(built).toBe(1);
    expect(calls).toEqual([
      'info()',
      'imageExists("present:1")',
      'imageExists("absent:1")',
      'stop("c1",7)',
      'containerEventsSince("c1",42)',
      'remove("c1")',
    ]);
  });

  it('a runtime that cannot be built fails the call that needed it, and every later one', async () => {
    let built = 0;
    const lazy = new LazyContainerRuntime(() => {
      built += 1;
      return Promise.reject(new Error('cannot load the engine client'));
    });
    await expect(lazy.info()).rejects.toThrow('cannot load the engine client');
    await expect(lazy.inspect('c1')).rejects.toThrow('cannot load the engine client');
    expect(built).toBe(1);
  });
});

describe('the lazy runtimes forward every method of the real ones', () => {
  const methods = (proto: object): string[] =>
    Object.getOwnPropertyNames(proto).filter((n) => n !== 'constructor' && !n.startsWith('#'));

  it('LazyContainerRuntime has every public method of DockerContainerRuntime (an optional one left out is silently lost)', async () => {
    const { DockerContainerRuntime } = await import('../../src/adapters/docker/docker-container-runtime.js');
    const lazy = new Set([...methods(LazyContainerRuntime.prototype)]);
    // `split` is the adapter's own helper (demultiplexing), and `networkMode` the session engine's (it holds the
    // DockerContainerRuntime itself): neither is a method of the port.
    expect(
      methods(DockerContainerRuntime.prototype).filter(
        (m) => !lazy.has(m) && m !== 'split' && m !== 'networkMode',
      ),
    ).toEqual([]);
  });

  it('LazyExecutorRuntime has every public method of SwarmContainerRuntime that the port declares', async () => {
    const { SwarmContainerRuntime } = await import('../../src/adapters/swarm/swarm-container-runtime.js');
    const { LazyExecutorRuntime } = await import('../../src/adapters/docker/lazy-container-runtime.js');
    const lazy = new Set([
      ...methods(LazyContainerRuntime.prototype),
      ...methods(LazyExecutorRuntime.prototype),
    ]);
    // `nodes` and `nodeName` are the swarm's own (start asks the swarm runtime itself), not the port's.
    expect(
      methods(SwarmContainerRuntime.prototype).filter(
        (m) => !lazy.has(m) && m !== 'nodes' && m !== 'nodeName',
      ),
    ).toEqual([]);
  });

  it('forwards filesystemChanges (the sessions-copy skip) and answers null when the real runtime has none', async () => {
    const calls: string[] = [];
    const lazy = new LazyContainerRuntime(() => Promise.resolve(fakeRuntime(calls)));
    expect(await lazy.filesystemChanges('c1')).toBeNull();
    expect(calls).toEqual(['filesystemChanges("c1")']);
  });
});
