import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { observeGpus } from '../../../src/adapters/nvidia-smi.js';
import {
  compareDeclaredTotal,
  NVIDIA_SMI_QUERY_ARGS,
  parseNvidiaSmi,
  type GpuObservation,
} from '../../../src/core/gpu/nvidia-smi-parse.js';

const FIXTURES = join(import.meta.dirname, '..', '..', 'fixtures', 'nvidia-smi');
const FAKE_BINARY = join(import.meta.dirname, '..', '..', 'fixtures', 'bin', 'fake-nvidia-smi');

function fixture(name: string): Promise<string> {
  return readFile(join(FIXTURES, name), 'utf8');
}

function observed(observation: GpuObservation): Extract<GpuObservation, { kind: 'observed' }> {
  if (observation.kind !== 'observed')
    throw new Error(`expected an observation, got ${JSON.stringify(observation)}`);
  return observation;
}

describe('parseNvidiaSmi', () => {
  it('parses one GPU', async () => {
    const result = observed(parseNvidiaSmi(await fixture('one-gpu.txt')));
    expect(result.gpus).toEqual([
      {
        index: 0,
        uuid: 'GPU-5f3c2a71-9d0e-4b8a-a6c1-2e7d94b0f813',
        name: 'NVIDIA H100 80GB HBM3',
        memoryTotalMib: 81559,
        memoryUsedMib: 1,
        memoryFreeMib: 81080,
      },
    ]);
    expect(result.totalMib).toBe(81559);
  });

  it('parses two GPUs and sums their memory.total', async () => {
    const result = observed(parseNvidiaSmi(await fixture('two-gpus.txt')));
    expect(result.gpus.map((gpu) => [gpu.index, gpu.memoryUsedMib])).toEqual([
      [0, 1234],
      [1, 0],
    ]);
    expect(result.totalMib).toBe(81920);
  });

  it('parses eight GPUs in order with distinct uuids', async () => {
    const result = observed(parseNvidiaSmi(await fixture('eight-gpus.txt')));
    expect(result.gpus.map((gpu) => gpu.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(new Set(result.gpus.map((gpu) => gpu.uuid)).size).toBe(8);
    expect(result.gpus[7]).toMatchObject({ name: 'NVIDIA H200', memoryUsedMib: 704, memoryFreeMib: 142567 });
    expect(result.totalMib).toBe(8 * 143771);
  });

  it('turns [N/A] and [Not Supported] into null and leaves them out of the total', async () => {
    const result = observed(parseNvidiaSmi(await fixture('not-available.txt')));
    expect(result.gpus[0]).toMatchObject({ memoryTotalMib: null, memoryUsedMib: null, memoryFreeMib: null });
    expect(result.gpus[1]).toMatchObject({
      name: 'Tesla T4',
      memoryTotalMib: 15360,
      memoryUsedMib: null,
      memoryFreeMib: null,
    });
    expect(result.totalMib).toBe(15360);
  });

  it('reports garbage with the line number', async () => {
    const result = parseNvidiaSmi(await fixture('garbage.txt'));
    expect(result).toMatchObject({ kind: 'unobservable', reason: 'garbage' });
    expect(result.kind === 'unobservable' && result.detail).toMatch(
      /^line 1: expected 6 fields, got 1: NVIDIA-SMI has failed/,
    );
  });

  it.each([
    ['a header line', 'index, uuid, name, memory.total [MiB], memory.used [MiB], memory.free [MiB]\n'],
    ['units left in', '0, GPU-abcd, NVIDIA H100, 81559 MiB, 1 MiB, 81080 MiB\n'],
    ['a negative index', '-1, GPU-abcd, NVIDIA H100, 81559, 1, 81080\n'],
    ['an empty name', '0, GPU-abcd, , 81559, 1, 81080\n'],
    ['a fractional memory', '0, GPU-abcd, NVIDIA H100, 81559.5, 1, 81080\n'],
    ['an unknown placeholder', '0, GPU-abcd, NVIDIA H100, [GPU is lost], 1, 81080\n'],
    ['a repeated index', '0, GPU-aaaa, A, 1, 1, 0\n0, GPU-bbbb, B, 1, 1, 0\n'],
    ['a repeated uuid', '0, GPU-aaaa, A, 1, 1, 0\n1, GPU-aaaa, B, 1, 1, 0\n'],
    ['a good line then a bad one', '0, GPU-aaaa, A, 1, 1, 0\nsegfault\n'],
  ])('rejects %s as garbage', (_what, stdout) => {
    expect(parseNvidiaSmi(stdout)).toMatchObject({ kind: 'unobservable', reason: 'garbage' });
  });

  it('keeps the garbage detail short', () => {
    const result = parseNvidiaSmi('x'.repeat(10_000));
    expect(result.kind === 'unobservable' && result.detail.length).toBeLessThanOrEqual(200);
  });

  it('reports no GPUs for empty output, blank lines and "No devices were found"', async () => {
    for (const stdout of [await fixture('empty.txt'), '\n\r\n  \n', await fixture('no-devices.txt')]) {
      expect(parseNvidiaSmi(stdout), JSON.stringify(stdout)).toMatchObject({
        kind: 'unobservable',
        reason: 'no_gpus',
      });
    }
  });

  it('reads the same GPUs with or without a trailing newline, and with CRLF line ends', async () => {
    const text = await fixture('two-gpus.txt');
    const expected = parseNvidiaSmi(text);
    expect(expected.kind).toBe('observed');
    expect(parseNvidiaSmi(text.trimEnd())).toEqual(expected);
    expect(parseNvidiaSmi(text.replaceAll('\n', '\r\n'))).toEqual(expected);
    expect(parseNvidiaSmi(`${text}\n\n`)).toEqual(expected);
  });
});

describe('compareDeclaredTotal', () => {
  const oneGpu = (totalMib: number | null): GpuObservation =>
    parseNvidiaSmi(`0, GPU-aaaa, H100, ${totalMib === null ? '[N/A]' : totalMib}, 0, 0\n`);

  it.each([
    { declared: 81559, observedMib: 81559, kind: 'match' },
    { declared: 81559, observedMib: 81559 - 815, kind: 'match' }, // within 1%
    { declared: 81559, observedMib: 81559 + 816, kind: 'mismatch' }, // beyond 1%
    { declared: 4000, observedMib: 4064, kind: 'match' }, // 1% is 40 MiB: the 64 MiB floor applies
    { declared: 4000, observedMib: 4065, kind: 'mismatch' },
    { declared: 0, observedMib: 4000, kind: 'mismatch' },
  ])('declared $declared vs observed $observedMib → $kind', ({ declared, observedMib, kind }) => {
    const comparison = compareDeclaredTotal(declared, oneGpu(observedMib));
    expect(comparison.kind).toBe(kind);
    expect(comparison.message).toContain(`${observedMib} MiB`);
  });

  it('hints when the declared value matches a single GPU of several', async () => {
    const comparison = compareDeclaredTotal(40960, parseNvidiaSmi(await fixture('two-gpus.txt')));
    expect(comparison.kind).toBe('mismatch');
    expect(comparison.message).toMatch(/matches GPU 0 alone/);
  });

  it('is unobservable without an observation or with a GPU lacking memory.total', () => {
    expect(compareDeclaredTotal(81559, oneGpu(null))).toMatchObject({
      kind: 'unobservable',
      message: expect.stringMatching(/GPU 0/),
    });
    const missing = compareDeclaredTotal(81559, {
      kind: 'unobservable',
      reason: 'binary_missing',
      detail: 'nvidia-smi: not found',
    });
    expect(missing).toEqual({
      kind: 'unobservable',
      message: 'GPU memory not observable (binary_missing): nvidia-smi: not found',
    });
  });
});

describe('observeGpus with a fake nvidia-smi (real child process)', () => {
  let dir = '';
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-nvidia-smi-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** A wrapper script that runs the fake binary with the given environment. */
  async function fakeWith(name: string, env: Record<string, string>): Promise<string> {
    const exports = Object.entries(env)
      .map(([key, value]) => `${key}='${value}'`)
      .join(' ');
    const path = join(dir, name);
    await writeFile(path, `#!/bin/sh\n${exports} exec /bin/sh '${FAKE_BINARY}' "$@"\n`);
    await chmod(path, 0o755);
    return path;
  }

  it('observes the GPUs the binary prints, and passes the documented query', async () => {
    const argsFile = join(dir, 'args.txt');
    const binary = await fakeWith('ok', {
      FAKE_NVIDIA_SMI_FIXTURE: join(FIXTURES, 'two-gpus.txt'),
      FAKE_NVIDIA_SMI_ARGS_FILE: argsFile,
    });
    const result = observed(await observeGpus({ binary }));
    expect(result.gpus.map((gpu) => gpu.uuid)).toEqual([
      'GPU-0b6e1d2c-3f4a-4e5b-8c9d-0a1b2c3d4e5f',
      'GPU-1c7f2e3d-4a5b-4f6c-9d0e-1b2c3d4e5f60',
    ]);
    expect((await readFile(argsFile, 'utf8')).trimEnd().split('\n')).toEqual([...NVIDIA_SMI_QUERY_ARGS]);
  });

  it('reports a missing binary', async () => {
    const binary = join(dir, 'no-such-nvidia-smi');
    expect(await observeGpus({ binary })).toEqual({
      kind: 'unobservable',
      reason: 'binary_missing',
      detail: `${binary}: not found`,
    });
  });

  it('reports a file that is not executable as a missing binary', async () => {
    const binary = join(dir, 'not-executable');
    await writeFile(binary, '#!/bin/sh\nexit 0\n', { mode: 0o644 });
    expect(await observeGpus({ binary })).toMatchObject({
      kind: 'unobservable',
      reason: 'binary_missing',
      detail: expect.stringMatching(/EACCES/),
    });
  });

  it('reports a non-zero exit with the first line the binary printed', async () => {
    const binary = await fakeWith('fails', {
      FAKE_NVIDIA_SMI_FIXTURE: join(FIXTURES, 'garbage.txt'),
      FAKE_NVIDIA_SMI_EXIT: '9',
    });
    const result = await observeGpus({ binary });
    expect(result).toMatchObject({ kind: 'unobservable', reason: 'nonzero_exit' });
    expect(result.kind === 'unobservable' && result.detail).toMatch(/exit 9: NVIDIA-SMI has failed/);
  });

  it('reports "No devices were found" with a non-zero exit as no GPUs', async () => {
    const binary = await fakeWith('none', {
      FAKE_NVIDIA_SMI_FIXTURE: join(FIXTURES, 'no-devices.txt'),
      FAKE_NVIDIA_SMI_EXIT: '6',
    });
    expect(await observeGpus({ binary })).toMatchObject({ kind: 'unobservable', reason: 'no_gpus' });
  });

  it('reports garbage printed with exit 0', async () => {
    const binary = await fakeWith('garbage', { FAKE_NVIDIA_SMI_FIXTURE: join(FIXTURES, 'garbage.txt') });
    expect(await observeGpus({ binary })).toMatchObject({ kind: 'unobservable', reason: 'garbage' });
  });

  it('reports a binary that never answers as a timeout', async () => {
    const binary = await fakeWith('hangs', { FAKE_NVIDIA_SMI_HANG: '1' });
    expect(await observeGpus({ binary, timeoutMs: 300 })).toEqual({
      kind: 'unobservable',
      reason: 'timeout',
      detail: `${binary}: no answer within 300 ms`,
    });
  });
});
