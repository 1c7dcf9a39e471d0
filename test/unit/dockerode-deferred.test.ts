import { describe, expect, it } from 'vitest';
import { deferredModule } from '../../src/adapters/docker/dockerode.js';

class Client {
  readonly args: unknown[];
  constructor(...args: unknown[]) {
    this.args = args;
  }
}

/** A real module's stand-in that counts its loads. */
function counted(): { load: () => object; loads: () => number } {
  let loads = 0;
  return {
    load: () => {
      loads += 1;
      return { Client, version: '1.2.3', helper: (x: number) => x * 2 };
    },
    loads: () => loads,
  };
}

describe('deferredModule (dockerode without its unused transports)', () => {
  it('loads nothing until a property is read, then once', () => {
    const real = counted();
    const module = deferredModule(real.load) as { version: string; helper: (x: number) => number };
    expect(real.loads()).toBe(0);
    expect(module.version).toBe('1.2.3');
    expect(module.helper(21)).toBe(42);
    expect(real.loads()).toBe(1);
  });

  it('answers a named constructor without loading, and constructs the real class with the same arguments', () => {
    const real = counted();
    const module = deferredModule(real.load, ['Client']) as { Client: new (...a: unknown[]) => Client };
    const StandIn = module.Client; // what docker-modem does as it loads: `require('ssh2').Client`
    expect(real.loads()).toBe(0);
    const made = new StandIn('host', 22);
    expect(real.loads()).toBe(1);
    expect(made).toBeInstanceOf(Client);
    expect(made.args).toEqual(['host', 22]);
    expect(module.Client).toBe(Client); // once loaded, the real class itself
  });

  it('lists and describes the real module once asked', () => {
    const real = counted();
    const module = deferredModule(real.load);
    expect(Object.keys(module).sort()).toEqual(['Client', 'helper', 'version']);
    expect('version' in module).toBe(true);
    expect(real.loads()).toBe(1);
  });

  it('a load that fails fails each use, with the loader’s error', () => {
    const module = deferredModule(() => {
      throw new Error('Cannot find module ssh2');
    }) as { Client: unknown };
    expect(() => module.Client).toThrow('Cannot find module ssh2');
  });
});
