import type { CapacityRegistry } from '../../src/app/ports/capacity-registry.js';
import type { ContainerRuntime } from '../../src/app/ports/container-runtime.js';
import type { FileSystem } from '../../src/app/ports/file-system.js';
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

/** The keys of `T` that are optional. */
type OptionalKeys<T> = { [K in keyof T]-?: object extends Pick<T, K> ? K : never }[keyof T];

/** ContainerRuntime's optional capabilities, all of them (the compiler checks the list against the port). */
const RUNTIME_CAPABILITIES = Object.keys({
  imageId: true,
  filesystemChanges: true,
  gpuGrantOf: true,
  collectMounts: true,
  writableLayerBytes: true,
} satisfies Record<OptionalKeys<ContainerRuntime>, true>);

/** A container runtime holding only what a test uses; the capabilities it leaves out are absent. */
export const fakeRuntime = (given: Partial<ContainerRuntime>): ContainerRuntime =>
  fakeOf<ContainerRuntime>('ContainerRuntime', given, RUNTIME_CAPABILITIES);

/** An engine that answers `info` (with `info` added) and has every image: enough for prepareBatch. */
export const answeringEngine = (
  info: { readonly dataRoot?: string } = {},
  given: Partial<ContainerRuntime> = {},
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

export const fakeFileSystem = (given: Partial<FileSystem>): FileSystem =>
  fakeOf<FileSystem>('FileSystem', given);

/** A logger that drops every line but those `given` records. */
export const fakeLogger = (given: Partial<Logger> = {}): Logger => ({ ...silentLogger, ...given });
