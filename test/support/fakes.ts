import type { CapacityRegistry } from '../../src/app/ports/capacity-registry.js';
import type { Readable } from 'node:stream';
import type {
  ContainerHandle,
  ContainerOutput,
  ContainerRuntime,
  ContainerSpec,
  ContainerState,
  EngineInfo,
  RemoveResult,
  WaitResult,
} from '../../src/app/ports/container-runtime.js';
import type {
  DiskFootprints,
  GpuGrants,
  ImagePins,
  ImagePlacement,
  LayerChanges,
  LinkChecks,
  MountCollection,
  NetworkPreparation,
} from '../../src/app/ports/runtime-capabilities.js';
import type { ExecutePairDeps } from '../../src/app/pair/execute-pair-types.js';
import type { RunPairDeps } from '../../src/app/pair/run-pair-types.js';
import type { Clock } from '../../src/app/ports/clock.js';
import type { FileSystem } from '../../src/app/ports/file-system.js';
import type { HostIdentity } from '../../src/app/ports/host-identity.js';
import type { OutcomeReader } from '../../src/app/ports/outcome-reader.js';
import { silentLogger, type Logger } from '../../src/app/ports/logger.js';

/**
 * A fake of port `T` holding only what a test uses: `given` is checked against the port at compile time (a method
 * renamed or retyped in the port breaks the fake), and any member it leaves out throws `NAME.member is not faked`
 * when the code under test touches it, so a test never passes on a silent stub.
 */
export function fakeOf<T extends object>(
  name: string,
  given: Partial<T>,
  /** The port's optional members: one left out reads as absent (undefined), as the port allows. */
  optional: readonly PropertyKey[] = [],
): T {
  const handler: ProxyHandler<Partial<T>> = {
    get(target, prop, receiver) {
      if (prop in target || typeof prop === 'symbol' || prop === 'then' || optional.includes(prop))
        return Reflect.get(target, prop, receiver);
      throw new Error(`${name}.${prop} is not faked`);
    },
  };
  // The one unchecked step: a Partial<T> whose missing members throw stands for the whole port.
  return new Proxy(given, handler) as T;
}

export const fakeRegistry = (given: Partial<CapacityRegistry>): CapacityRegistry =>
  fakeOf<CapacityRegistry>('CapacityRegistry', given);

/** Every capability a runtime may add to the closed port (src/app/ports/runtime-capabilities.ts). */
type RuntimeCapabilities = ImagePins &
  ImagePlacement &
  LayerChanges &
  LinkChecks &
  GpuGrants &
  MountCollection &
  DiskFootprints &
  NetworkPreparation;

/** The capabilities, all of them (the compiler checks the list against them): one left out reads as absent. */
const RUNTIME_CAPABILITIES = Object.keys({
  imageId: true,
  imageNodes: true,
  filesystemChanges: true,
  linkFreePath: true,
  gpuGrantOf: true,
  collectMounts: true,
  diskFootprint: true,
  prepareNetwork: true,
} satisfies Record<keyof RuntimeCapabilities, true>);

/** A container runtime holding only what a test uses, with the capabilities it gives; those it leaves out are absent. */
export const fakeRuntime = (given: Partial<ContainerRuntime & RuntimeCapabilities>): ContainerRuntime =>
  fakeOf<ContainerRuntime & RuntimeCapabilities>('ContainerRuntime', given, RUNTIME_CAPABILITIES);

/** An engine that answers `info` (with `info` added) and has every image: enough for prepareBatch. */
export const answeringEngine = (
  info: { readonly dataRoot?: string } = {},
  given: Partial<ContainerRuntime & RuntimeCapabilities> = {},
): ContainerRuntime =>
  fakeRuntime({
    info: () =>
      Promise.resolve({
        id: 'fake-engine',
        version: '20.10.24',
        apiVersion: '1.41',
        runtimes: ['runc'],
        ...info,
      }),
    imageExists: () => Promise.resolve(true),
    ...given,
  });

/**
 * The whole ContainerRuntime port, each method rejecting `NAME.method is not scripted`: a test's engine class extends
 * it and overrides what the test scripts (the compiler checks each override against the port), so a call the test
 * did not foresee fails by name instead of `undefined is not a function`. The optional capabilities stay absent.
 */
export class UnscriptedRuntime implements ContainerRuntime {
  info(): Promise<EngineInfo> {
    return this.#refuse('info');
  }
  imageExists(_image: string): Promise<boolean> {
    return this.#refuse('imageExists');
  }
  stop(_id: string, _timeoutSec: number): Promise<void> {
    return this.#refuse('stop');
  }
  remove(_id: string): Promise<RemoveResult> {
    return this.#refuse('remove');
  }
  inspect(_id: string): Promise<ContainerState | null> {
    return this.#refuse('inspect');
  }
  listByLabel(_labels: Readonly<Record<string, string>>): Promise<ContainerState[]> {
    return this.#refuse('listByLabel');
  }
  create(_spec: ContainerSpec): Promise<ContainerHandle> {
    return this.#refuse('create');
  }
  attach(_id: string): Promise<ContainerOutput> {
    return this.#refuse('attach');
  }
  follow(_id: string): Promise<ContainerOutput> {
    return this.#refuse('follow');
  }
  start(_id: string): Promise<void> {
    return this.#refuse('start');
  }
  wait(
    _id: string,
    _options: { readonly deadlineMs: number; readonly signal?: AbortSignal },
  ): Promise<WaitResult> {
    return this.#refuse('wait');
  }
  environmentOf(_id: string): Promise<Record<string, string> | null> {
    return this.#refuse('environmentOf');
  }
  getArchive(_id: string, _path: string): Promise<Readable | null> {
    return this.#refuse('getArchive');
  }
  containerEventsSince(
    _id: string,
    _sinceMs: number,
  ): Promise<{ readonly actions: readonly string[]; readonly complete: boolean }> {
    return this.#refuse('containerEventsSince');
  }
  #refuse(method: string): Promise<never> {
    return Promise.reject(new Error(`${this.constructor.name}.${method} is not scripted`));
  }
}

/** A whole ContainerSpec for a test that cares about a few of its fields (`given`). */
export const containerSpec = (given: Partial<ContainerSpec> = {}): ContainerSpec => ({
  name: 'pair',
  image: 'img',
  env: {},
  binds: [],
  ports: [],
  bindAddress: '127.0.0.1',
  deviceRequests: [],
  labels: {},
  stopTimeoutSec: 1,
  cmd: [],
  workingDir: '/',
  ...given,
});

export const fakeFileSystem = (given: Partial<FileSystem>): FileSystem =>
  fakeOf<FileSystem>('FileSystem', given);

/** A logger that drops every line but those `given` records. */
export const fakeLogger = (given: Partial<Logger> = {}): Logger => ({ ...silentLogger, ...given });

const notFaked = (name: string) => (): Promise<never> => Promise.reject(new Error(`${name} is not faked`));

/**
 * What executePair needs, `given` over fakes that throw `NAME… is not faked` when used (the logger: silent), so a
 * test names only the parts its path touches and the compiler still checks each of them.
 */
export const executeDeps = (given: Partial<ExecutePairDeps>): ExecutePairDeps => ({
  runtime: fakeRuntime({}),
  clock: fakeOf<Clock>('Clock', {}),
  logger: silentLogger,
  fs: fakeFileSystem({}),
  host: fakeOf<HostIdentity>('HostIdentity', {}),
  outcomes: fakeOf<OutcomeReader>('OutcomeReader', {}),
  createRedactor: () => {
    throw new Error('createRedactor is not faked');
  },
  extractSessions: notFaked('extractSessions'),
  diagnose: notFaked('diagnose'),
  ...given,
});

/** What `pair run` needs: executeDeps, and a registry that throws when used unless `given` has one. */
export const runPairDeps = (given: Partial<RunPairDeps>): RunPairDeps => ({
  ...executeDeps(given),
  registry: fakeRegistry({}),
  ...given,
});
