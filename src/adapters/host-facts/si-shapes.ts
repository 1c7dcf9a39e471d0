import type { CpuFact, GpuController, MemoryFact, MountFact, OsFact } from '../../core/host-facts.js';
import { InternalError } from '../../core/errors.js';

/**
 * systeminformation's answers (as JSON from its child process) read into our facts. Anything not of the expected
 * shape throws, and the fact becomes unknown with that message.
 */

type Raw = Record<string, unknown>;

function record(value: unknown, what: string): Raw {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new InternalError(`${what}: not an object`);
  return value as Raw;
}

function list(value: unknown, what: string): unknown[] {
  if (!Array.isArray(value)) throw new InternalError(`${what}: not a list`);
  return value;
}

function count(raw: Raw, key: string, what: string): number {
  const value = raw[key];
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0)
    throw new InternalError(`${what}: no ${key}`);
  return value;
}

const text = (raw: Raw, key: string): string => (typeof raw[key] === 'string' ? raw[key].trim() : '');

export function cpuFromSi(value: unknown): CpuFact {
  const raw = record(value, 'cpu');
  const model = [text(raw, 'manufacturer'), text(raw, 'brand')].filter((s) => s !== '').join(' ');
  const cores = count(raw, 'cores', 'cpu');
  if (cores === 0) throw new InternalError('cpu: no cores reported');
  return {
    model: model === '' ? 'unnamed' : model,
    cores,
    physical_cores: count(raw, 'physicalCores', 'cpu'),
  };
}

export function memoryFromSi(value: unknown): MemoryFact {
  const raw = record(value, 'memory');
  const total = count(raw, 'total', 'memory');
  if (total === 0) throw new InternalError('memory: total is 0');
  return { total_bytes: total, available_bytes: count(raw, 'available', 'memory') };
}

export function osFromSi(value: unknown): OsFact {
  const raw = record(value, 'os');
  const kernel = text(raw, 'kernel');
  if (kernel === '') throw new InternalError('os: no kernel reported');
  return { distro: text(raw, 'distro'), release: text(raw, 'release'), kernel, arch: text(raw, 'arch') };
}

export function mountsFromSi(value: unknown): MountFact[] {
  return list(value, 'file systems').flatMap((entry) => {
    const raw = record(entry, 'file system');
    const mount = text(raw, 'mount');
    if (!mount.startsWith('/')) return [];
    return [
      {
        fs: text(raw, 'fs'),
        type: text(raw, 'type'),
        mount,
        size_bytes: count(raw, 'size', `file system ${mount}`),
        free_bytes: count(raw, 'available', `file system ${mount}`),
      },
    ];
  });
}

export function controllersFromSi(value: unknown): GpuController[] {
  return list(value, 'gpu controllers').map((entry) => {
    const raw = record(entry, 'gpu controller');
    return { vendor: text(raw, 'vendor'), model: text(raw, 'model') };
  });
}
