import { describe, expect, it } from 'vitest';
import { LazyContainerRuntime } from '../../src/adapters/docker/lazy-container-runtime.js';
import { lazyLogger } from '../../src/adapters/lazy-logger.js';
import type { ContainerRuntime } from '../../src/app/ports/container-runtime.js';
import type { Logger } from '../../src/app/ports/logger.js';

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

describe('lazyLogger', () => {
  it('builds the logger on its first line, once; children bind onto the same one', () => {
    const lines: string[] = [];
    let built = 0;
    const real = (bindings: Record<string, unknown>): Logger => ({
      info: (_f, m) => lines.push(`info ${JSON.stringify(bindings)} ${m}`),
      warn: (_f, m) => lines.push(`warn ${JSON.stringify(bindings)} ${m}`),
      error: (_f, m) => lines.push(`error ${JSON.stringify(bindings)} ${m}`),
      debug: (_f, m) => lines.push(`debug ${JSON.stringify(bindings)} ${m}`),
      child: (more) => real({ ...bindings, ...more }),
    });
    const logger = lazyLogger(() => {
      built += 1;
      return real({});
    });
    const child = logger.child({ job: 'a' });
    expect(built).toBe(0);
    child.warn({}, 'first');
    logger.error({}, 'second');
    logger.debug({}, 'third');
    child.info({}, 'fourth');
    expect(built).toBe(1);
    expect(lines).toEqual([
      'warn {"job":"a"} first',
      'error {} second',
      'debug {} third',
      'info {"job":"a"} fourth',
    ]);
  });
});

describe('LazyContainerRuntime with an info probe', () => {
  const engineInfo = { id: 'probed', version: '28.0', apiVersion: '1.48', runtimes: ['runc'] };

  it('answers the first info() from the probe and builds the real runtime meanwhile; later calls use the real one', async () => {
    const calls: string[] = [];
    let built = 0;
    const lazy = new LazyContainerRuntime(
      () => {
        built += 1;
        return Promise.resolve(fakeRuntime(calls));
      },
      () => Promise.resolve({ sent: Promise.resolve(), info: Promise.resolve(engineInfo) }),
    );
    expect(await lazy.info()).toEqual(engineInfo);
    expect(built).toBe(1);
    expect(await lazy.imageExists('present:1')).toBe(true);
    expect((await lazy.info()).id).toBe('engine'); // the real runtime now
    expect(built).toBe(1);
    expect(calls).toEqual(['imageExists("present:1")', 'info()']);
  });

  it("answers the first imageExists() (pair run's first call) from the image probe; later calls use the real runtime", async () => {
    const calls: string[] = [];
    const probed: string[] = [];
    let built = 0;
    const lazy = new LazyContainerRuntime(
      () => {
        built += 1;
        return Promise.resolve(fakeRuntime(calls));
      },
      undefined,
      (image) => {
        probed.push(image);
        return Promise.resolve({ sent: Promise.resolve(), exists: Promise.resolve(image === 'probed:1') });
      },
    );
    expect(await lazy.imageExists('probed:1')).toBe(true);
    expect(probed).toEqual(['probed:1']);
    expect(built).toBe(1);
    expect(calls).toEqual([]);
    expect(await lazy.imageExists('present:1')).toBe(true); // the real runtime now
    expect(probed).toEqual(['probed:1']);
    expect(calls).toEqual(['imageExists("present:1")']);
  });

  it('a probe that cannot run here (null) leaves info() to the real runtime', async () => {
    const calls: string[] = [];
    const lazy = new LazyContainerRuntime(
      () => Promise.resolve(fakeRuntime(calls)),
      () => Promise.resolve(null),
    );
    expect((await lazy.info()).id).toBe('engine');
    expect(calls).toEqual(['info()']);
  });

  it("an engine that is not there: info() rejects with the probe's error, never as an unhandled rejection", async () => {
    const unavailable = Object.assign(new Error('Docker engine unreachable'), { exitCode: 3 });
    const lazy = new LazyContainerRuntime(
      () => Promise.resolve(fakeRuntime([])),
      // The answer fails before the requests count as sent (connect ENOENT): nothing awaits it yet.
      () =>
        Promise.resolve({
          sent: new Promise<void>((resolve) => setTimeout(resolve, 5)),
          info: Promise.reject(unavailable),
        }),
    );
    await expect(lazy.info()).rejects.toBe(unavailable);
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
