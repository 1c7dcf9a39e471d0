import { InvalidInputError } from '../errors.js';

/**
 * One entry of Docker's `HostConfig.DeviceRequests`. Exactly one of `Count` (-1 = all GPUs)
 * and `DeviceIDs` (indexes or UUIDs as nvidia-smi prints them) is set, never both.
 */
export interface DeviceRequest {
  readonly Driver: 'nvidia';
  readonly Count?: number;
  readonly DeviceIDs?: string[];
  readonly Capabilities: string[][];
}

/** The `gpus` field of a job (SPEC §3): "all", a count, a list of ids, or absent (no GPU). */
export type GpuSelection = 'all' | number | readonly string[] | undefined;

const BASE_CAPABILITY = 'gpu';

/**
 * Translates a job's `gpus` into Docker device requests.
 * - `undefined` → `[]` (the container gets no GPU);
 * - `"all"` → `Count: -1`; a positive integer n → `Count: n`; a list → `DeviceIDs` (a copy);
 * - Capabilities `[["gpu"]]`; with `extraCapabilities` (e.g. `["compute", "utility"]`) they are
 *   appended after `"gpu"`, without duplicates: `[["gpu", "compute", "utility"]]`.
 *
 * The manifest schema validates `gpus` first; a value it should have rejected (count < 1,
 * an empty list, an empty or repeated id) throws InvalidInputError `E_SPEC_INVALID` at path `gpus`.
 */
export function deviceRequestsFor(
  gpus: GpuSelection,
  options: { extraCapabilities?: readonly string[] } = {},
): DeviceRequest[] {
  if (gpus === undefined) return [];
  const Capabilities = [capabilitiesWith(options.extraCapabilities ?? [])];
  if (gpus === 'all') return [{ Driver: 'nvidia', Count: -1, Capabilities }];
  if (typeof gpus === 'number') {
    if (!Number.isSafeInteger(gpus) || gpus < 1) invalidGpus('a GPU count must be an integer >= 1');
    return [{ Driver: 'nvidia', Count: gpus, Capabilities }];
  }
  return [{ Driver: 'nvidia', DeviceIDs: checkedIds(gpus), Capabilities }];
}

function capabilitiesWith(extra: readonly string[]): string[] {
  const capabilities = [BASE_CAPABILITY];
  for (const capability of extra) {
    if (capability !== '' && !capabilities.includes(capability)) capabilities.push(capability);
  }
  return capabilities;
}

function checkedIds(ids: readonly string[]): string[] {
  if (ids.length === 0) invalidGpus('a GPU id list must not be empty (omit "gpus" for no GPU)');
  const seen = new Set<string>();
  for (const id of ids) {
    if (id.trim() === '' || id !== id.trim())
      invalidGpus('a GPU id must be non-empty, without surrounding spaces');
    if (seen.has(id)) invalidGpus(`GPU id "${id}" is listed twice`);
    seen.add(id);
  }
  return [...ids];
}

function invalidGpus(rule: string): never {
  throw new InvalidInputError('E_SPEC_INVALID', 'gpus cannot be turned into a device request', [
    { path: 'gpus', rule },
  ]);
}
