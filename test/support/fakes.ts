import type { CapacityRegistry } from '../../src/app/ports/capacity-registry.js';
import type { FileSystem } from '../../src/app/ports/file-system.js';
import { silentLogger, type Logger } from '../../src/app/ports/logger.js';

/**
 * A fake of port `T` holding only what a test uses: `given` is checked against the port at compile time (a method
 * renamed or retyped in the port breaks the fake), and any member it leaves out throws `NAME.member is not faked`
 * when the code under test touches it, so a test never passes on a silent stub.
 */
export function fakeOf<T extends object>(name: string, given: Partial<T>): T {
  const handler: ProxyHandler<Partial<T>> = {
    get(target, prop, receiver) {
      if (prop in target || typeof prop === 'symbol' || prop === 'then')
        return Reflect.get(target, prop, receiver);
      throw new Error(`${name}.${prop} is not faked`);
    },
  };
  // The one unchecked step: a Partial<T> whose missing members throw stands for the whole port.
  return new Proxy(given, handler) as T;
}

export const fakeRegistry = (given: Partial<CapacityRegistry>): CapacityRegistry =>
  fakeOf<CapacityRegistry>('CapacityRegistry', given);

export const fakeFileSystem = (given: Partial<FileSystem>): FileSystem =>
  fakeOf<FileSystem>('FileSystem', given);

/** A logger that drops every line but those `given` records. */
export const fakeLogger = (given: Partial<Logger> = {}): Logger => ({ ...silentLogger, ...given });
