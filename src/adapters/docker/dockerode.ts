import { Agent, globalAgent, type AgentOptions } from 'node:http';
import Module, { createRequire } from 'node:module';
import type DockerClass from 'dockerode';

/**
 * dockerode, loaded without the transports a local engine never needs. Its modules require, at their top, gRPC and
 * its proto loader (BuildKit sessions, `buildImage` with `version: '2'`, which we never call) and ssh2 (`ssh://`
 * engines, a swarm manager's at most): 80 of its 130 ms of loading, paid by every process before its first engine
 * call (docs/benchmarks.md, "start-up"). Each is handed to dockerode as a deferred module that loads the real one on
 * first use, so an `ssh://` engine or a BuildKit session still works, loading what it needs then.
 *
 * The deferred modules sit in `require.cache` only while dockerode itself loads (synchronously, here) and are taken
 * out right after: a later `require` of the same package by anyone gets the real one, as does dockerode on first use.
 * A package already loaded in this process is left as it is.
 */
const requireHere = createRequire(import.meta.url);

/** Which modules are deferred, and who requires each: dockerode's lib/ (session.js) and docker-modem's (ssh.js, http.js). */
const DEFERRED: readonly {
  readonly owner: 'dockerode' | 'docker-modem';
  readonly id: string;
  /** Names read at load time but used only with `new` (deferredModule); `'module'`: the module itself is a class. */
  readonly constructors: readonly string[] | 'module' | 'logger';
}[] = [
  // docker-modem's logger (`require('debug')('modem')`: debug with supports-color and tty, about 10 ms of a
  // process's start, issue 39): while DEBUG is unset, as it is read once when debug loads, every logger it makes is
  // off, so docker-modem gets loggers that are off without loading it. With DEBUG set, the real one (below).
  { owner: 'docker-modem', id: 'debug', constructors: 'logger' },
  { owner: 'dockerode', id: '@grpc/grpc-js', constructors: [] },
  { owner: 'dockerode', id: '@grpc/proto-loader', constructors: [] },
  // docker-modem reads `.Client` as it loads and calls `new Client()` when an ssh:// engine is dialled
  { owner: 'docker-modem', id: 'ssh2', constructors: ['Client'] },
  // Node's own TLS client (https, tls and 15 more internal modules, issue 39): docker-modem requires it at its top and
  // reads it only to dial a TLS engine (`tcp://` with DOCKER_CERT_PATH). require.cache is asked before the built-ins
  // for a name without `node:` (Node's documented order), so the stand-in is what docker-modem gets while it loads.
  { owner: 'docker-modem', id: 'https', constructors: [] },
  // Build contexts (`buildImage` of a folder, which we never call): tar-fs with its own tar-stream and
  // readable-stream, and zlib for the gzip.
  { owner: 'dockerode', id: 'tar-fs', constructors: [] },
  { owner: 'dockerode', id: 'zlib', constructors: [] },
  // The duplex of a connection with stdin that the engine does not upgrade (an exec or attach with stdin and no
  // hijack; serve's execs hijack and get the socket), built on readable-stream (14 files, about a third of
  // docker-modem's load): docker-modem only ever does `new HttpDuplex(req, res)` with it.
  { owner: 'docker-modem', id: './http_duplex', constructors: 'module' },
];

/**
 * dockerode's options for the engine the environment names (DOCKER_HOST, as docker-modem reads it), with one change
 * when that engine is on a unix socket: an HTTP agent with the settings of Node's own, which sends no TLS server name.
 * Node works one out for every request sent through an agent (`net.isIP` of the host: its IPv6 expression compiled
 * on the process's first request, about 10 ms of CPU before a `pair run`'s first engine call, issue 39), and none is
 * ever sent over a unix socket. Any other transport: dockerode's defaults.
 */
export function localEngineOptions(
  environment: Readonly<Record<string, string | undefined>> = process.env,
): DockerClass.DockerOptions | undefined {
  const host = environment['DOCKER_HOST'] ?? '';
  if (process.platform === 'win32' || (host !== '' && !host.startsWith('unix://'))) return undefined;
  const defaults = (globalAgent as Agent & { options?: Record<string, unknown> }).options ?? {};
  // `agent` is docker-modem's option (passed to every request), not in dockerode's types; `servername` is Node's.
  const agent = new UnixSocketAgent({ ...defaults, servername: '' } as AgentOptions);
  return { agent } as unknown as DockerClass.DockerOptions;
}

/**
 * Node's agent, shown in one line. docker-modem writes every request's options with `util.inspect` (all hidden fields,
 * no depth limit) for its debug log, whether the log is on or not: an agent holding its kept-alive sockets took
 * about 1.5 ms of that per request, 33 ms of a `pair run` (CPU profile).
 */
class UnixSocketAgent extends Agent {
  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return 'Agent { unix socket }';
  }
}

/** dockerode's client class (`new Dockerode(options)`); its types stay `import type Docker from 'dockerode'`. */
export const Dockerode: typeof DockerClass = loadDockerode();

function loadDockerode(): typeof DockerClass {
  const dockerodeMain = requireHere.resolve('dockerode');
  const cache = requireHere.cache;
  // Loaded already (by a `require` or an `import` elsewhere): that one. An entry not yet `loaded` is one the ESM loader
  // put there while it links an `import` of dockerode, before running it: require it here as usual.
  const loaded = cache[dockerodeMain];
  if (loaded?.loaded === true) return loaded.exports as typeof DockerClass;
  const owners = {
    dockerode: createRequire(dockerodeMain),
    'docker-modem': createRequire(createRequire(dockerodeMain).resolve('docker-modem')),
  };
  const seeded: string[] = [];
  try {
    for (const { owner, id, constructors } of DEFERRED) {
      const requireFromOwner = owners[owner];
      const file = requireFromOwner.resolve(id);
      if (cache[file] !== undefined) continue;
      if (constructors === 'logger' && (process.env['DEBUG'] ?? '') !== '') continue;
      const placeholder = new Module(file);
      placeholder.filename = file;
      placeholder.loaded = true;
      const load = (): object => requireFromOwner(id) as object;
      placeholder.exports =
        constructors === 'logger'
          ? silentLoggers
          : constructors === 'module'
            ? deferredClass(load)
            : deferredModule(load, constructors);
      cache[file] = placeholder;
      seeded.push(file);
    }
    return requireHere('dockerode') as typeof DockerClass;
  } finally {
    for (const file of seeded) delete cache[file];
  }
}

/**
 * debug's factory as it is with DEBUG unset: every logger it makes is off (`enabled` false, a call does nothing). What
 * docker-modem reads of it: a call with a namespace, and calls of the logger.
 */
export function silentLoggers(namespace: string): ((...args: unknown[]) => void) & {
  enabled: boolean;
  namespace: string;
} {
  return Object.assign(() => undefined, { enabled: false, namespace });
}

/**
 * A module's exports that load the real module (`load`) on the first read of any property; `constructors` are the
 * names read at load time but only used with `new`: they answer a stand-in whose construction loads the real module
 * and constructs its class with the same arguments.
 */
export function deferredModule(load: () => object, constructors: readonly string[] = []): object {
  let real: object | undefined;
  const module = (): object => (real ??= load());
  const standIns = new Map<string, unknown>(
    constructors.map((name) => [
      name,
      function deferredConstructor(...args: unknown[]): object {
        const constructor = Reflect.get(module(), name) as new (...a: unknown[]) => object;
        return Reflect.construct(constructor, args);
      },
    ]),
  );
  return new Proxy(
    {},
    {
      get: (_target, key): unknown =>
        typeof key === 'string' && standIns.has(key) && real === undefined
          ? standIns.get(key)
          : (Reflect.get(module(), key) as unknown),
      has: (_target, key) => Reflect.has(module(), key),
      ownKeys: () => Reflect.ownKeys(module()),
      getOwnPropertyDescriptor: (_target, key) => {
        const descriptor = Reflect.getOwnPropertyDescriptor(module(), key);
        return descriptor === undefined ? undefined : { ...descriptor, configurable: true };
      },
    },
  );
}

/**
 * A module that is itself a class (`module.exports = HttpDuplex`), loaded (`load`) on its first use: `new`, a call, or
 * a read of a property (`prototype` for `instanceof`). What is constructed is the real class's own instance.
 */
export function deferredClass(load: () => object): object {
  let real: (new (...args: unknown[]) => object) | undefined;
  const module = (): new (...args: unknown[]) => object =>
    (real ??= load() as new (...args: unknown[]) => object);
  // A plain function as the target: a proxy can be constructed and called only if its target can.
  return new Proxy(function deferred() {}, {
    construct: (_target, args): object => Reflect.construct<unknown[], object>(module(), args),
    apply: (_target, self, args): unknown => Reflect.apply(module(), self, args) as unknown,
    get: (_target, key) => Reflect.get(module(), key) as unknown,
    has: (_target, key) => Reflect.has(module(), key),
  });
}
