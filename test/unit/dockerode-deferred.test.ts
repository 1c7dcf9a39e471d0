import { describe, expect, it } from 'vitest';
import { Agent } from 'node:http';
import { inspect } from 'node:util';
import {
  deferredClass,
  deferredModule,
  localEngineOptions,
  silentLoggers,
} from '../../src/adapters/docker/dockerode.js';

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

describe('deferredClass (a module that is a class: docker-modem’s HttpDuplex)', () => {
  class Duplex {
    readonly args: unknown[];
    constructor(...args: unknown[]) {
      this.args = args;
    }
  }
  /** A class like HttpDuplex, which constructs itself when called without `new`. */
  function SelfMaking(this: unknown, ...args: unknown[]): object {
    if (!(this instanceof SelfMaking))
      return new (SelfMaking as unknown as new (...a: unknown[]) => object)(...args);
    return this;
  }

  it('loads nothing until used; `new` constructs the real class, and instanceof holds for both', () => {
    let loads = 0;
    const StandIn = deferredClass(() => {
      loads += 1;
      return Duplex;
    }) as new (...a: unknown[]) => Duplex;
    expect(loads).toBe(0);
    const made = new StandIn('req', 'res');
    expect(loads).toBe(1);
    expect(made).toBeInstanceOf(Duplex);
    expect(made).toBeInstanceOf(StandIn);
    expect(made.args).toEqual(['req', 'res']);
    expect(new StandIn()).toBeInstanceOf(Duplex);
    expect(loads).toBe(1);
  });

  it('a call without `new` and a property read reach the real class', () => {
    const StandIn = deferredClass(() => SelfMaking) as unknown as ((...a: unknown[]) => object) & {
      prototype: object;
    };
    expect(StandIn()).toBeInstanceOf(SelfMaking);
    expect(StandIn.prototype).toBe(SelfMaking.prototype);
  });

  it('a load that fails fails each use', () => {
    const StandIn = deferredClass(() => {
      throw new Error('Cannot find module readable-stream');
    }) as new () => object;
    expect(() => new StandIn()).toThrow('Cannot find module readable-stream');
    expect(() => new StandIn()).toThrow('Cannot find module readable-stream');
  });
});

describe('silentLoggers (debug as it is with DEBUG unset)', () => {
  it('makes loggers that are off and do nothing', () => {
    const logger = silentLoggers('modem');
    expect(logger.enabled).toBe(false);
    expect(logger.namespace).toBe('modem');
    expect(logger('Sending: %s', { a: 1 })).toBeUndefined();
  });
});

describe('localEngineOptions (the agent for an engine on a unix socket)', () => {
  it('on a unix socket: an agent with Node’s own settings that names no TLS server; any other transport: defaults', () => {
    for (const env of [{}, { DOCKER_HOST: '' }, { DOCKER_HOST: 'unix:///run/other.sock' }]) {
      const options = localEngineOptions(env) as { agent?: Agent & { options: Record<string, unknown> } };
      expect(options.agent).toBeInstanceOf(Agent);
      expect(options.agent?.options).toMatchObject({ servername: '', keepAlive: true });
    }
    for (const host of ['tcp://127.0.0.1:2375', 'ssh://me@host', 'https://engine:2376', 'npipe:////./pipe/x'])
      expect(localEngineOptions({ DOCKER_HOST: host })).toBeUndefined();
  });

  it("is one short line to util.inspect, which docker-modem runs on every request's options (no depth limit)", () => {
    const { agent } = localEngineOptions({}) as { agent: Agent };
    expect(inspect({ agent }, { showHidden: true, depth: null })).toBe('{ agent: Agent { unix socket } }');
  });
});
