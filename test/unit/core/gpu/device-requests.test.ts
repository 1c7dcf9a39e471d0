import { describe, expect, it } from 'vitest';
import { deviceRequestsFor, type DeviceRequest } from '../../../../src/core/gpu/device-requests.js';
import { InvalidInputError } from '../../../../src/core/errors.js';

function onlyRequest(requests: DeviceRequest[]): DeviceRequest {
  expect(requests).toHaveLength(1);
  return requests[0]!;
}

describe('deviceRequestsFor', () => {
  it('asks for no device when gpus is absent', () => {
    expect(deviceRequestsFor(undefined)).toEqual([]);
    expect(deviceRequestsFor(undefined, { extraCapabilities: ['compute'] })).toEqual([]);
  });

  it('maps "all" to Count -1 with the gpu capability', () => {
    expect(deviceRequestsFor('all')).toEqual([{ Driver: 'nvidia', Count: -1, Capabilities: [['gpu']] }]);
  });

  it('maps a count to Count n', () => {
    expect(deviceRequestsFor(2)).toEqual([{ Driver: 'nvidia', Count: 2, Capabilities: [['gpu']] }]);
  });

  it('maps ids (indexes or UUIDs) to DeviceIDs, as a copy of the list', () => {
    const ids = ['0', 'GPU-5f3c2a71-9d0e-4b8a-a6c1-2e7d94b0f813'];
    const request = onlyRequest(deviceRequestsFor(ids));
    expect(request).toEqual({ Driver: 'nvidia', DeviceIDs: ids, Capabilities: [['gpu']] });
    expect(request.DeviceIDs).not.toBe(ids);
  });

  it('appends extra capabilities after gpu, without duplicates', () => {
    const request = onlyRequest(
      deviceRequestsFor('all', { extraCapabilities: ['compute', 'utility', 'gpu', 'compute'] }),
    );
    expect(request.Capabilities).toEqual([['gpu', 'compute', 'utility']]);
    expect(onlyRequest(deviceRequestsFor(1, { extraCapabilities: [] })).Capabilities).toEqual([['gpu']]);
  });

  it('never sets both Count and DeviceIDs, and always sets one of them', () => {
    const selections = ['all', 1, 8, ['0'], ['0', '1', 'GPU-x']] as const;
    for (const gpus of selections) {
      const request = onlyRequest(deviceRequestsFor(gpus, { extraCapabilities: ['compute', 'utility'] }));
      const keys = Object.keys(request).filter((key) => key === 'Count' || key === 'DeviceIDs');
      expect(keys, JSON.stringify(gpus)).toHaveLength(1);
      expect(request.Driver).toBe('nvidia');
    }
  });

  it.each([
    { gpus: 0, rule: /integer >= 1/ },
    { gpus: -1, rule: /integer >= 1/ },
    { gpus: 1.5, rule: /integer >= 1/ },
    { gpus: [] as string[], rule: /must not be empty/ },
    { gpus: ['0', ''], rule: /non-empty/ },
    { gpus: [' 0'], rule: /surrounding spaces/ },
    { gpus: ['0', '0'], rule: /listed twice/ },
  ])('rejects gpus=$gpus at path gpus', ({ gpus, rule }) => {
    let caught: unknown;
    try {
      deviceRequestsFor(gpus);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(InvalidInputError);
    const err = caught as InvalidInputError;
    expect(err.code).toBe('E_SPEC_INVALID');
    expect(err.issues[0]?.path).toBe('gpus');
    expect(err.issues[0]?.rule).toMatch(rule);
  });
});
