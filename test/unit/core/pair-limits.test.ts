import { describe, expect, it } from 'vitest';
import { pairLimitsCheck } from '../../../src/app/doctor/host-checks.js';
import { sessionLimits } from '../../../src/app/serve/session-create.js';
import type { HostFactsRecord } from '../../../src/core/host-facts.js';
import { SessionCreateSchema } from '../../../src/app/serve/session-schemas.js';
import { parseManifest, parsePairSpec } from '../../../src/core/manifest/parse.js';
import {
  containerLimitsOf,
  DEFAULT_PIDS_LIMIT,
  effectiveLimits,
  FALLBACK_DISK_LIMIT_BYTES,
  FALLBACK_MEMORY_MIB,
  limitDefaults,
  MIN_DEFAULT_MEMORY_MIB,
  PAIR_CAPABILITIES,
} from '../../../src/core/pair-limits.js';

const GIB = 1024 ** 3;
const job = { job_id: 'j', argv: ['/bin/true'], cwd: '/w/j', outcome_path: '/w/out/j.json' };
const manifest = (extra: Record<string, unknown>): unknown => ({
  schema: 'roboguide.e1.batch/v0.1',
  image: 'i',
  jobs: [{ ...job, ...extra }],
});

function issuesOf(extra: Record<string, unknown>): { path: string; rule: string }[] {
  const parsed = parseManifest(JSON.stringify(manifest(extra)));
  return parsed.ok ? [] : parsed.issues.map((i) => ({ path: i.path, rule: i.rule }));
}

describe('limit fields (manifest, pair run spec)', () => {
  it('accepts the four fields and keeps them absent when not given', () => {
    const parsed = parseManifest(
      JSON.stringify(manifest({ pids_limit: 64, memory_mib: 512, cpus: 1.5, disk_limit_bytes: 1048576 })),
    );
    expect(parsed.ok && parsed.manifest.jobs[0]).toMatchObject({
      pids_limit: 64,
      memory_mib: 512,
      cpus: 1.5,
      disk_limit_bytes: 1048576,
    });
    const bare = parseManifest(JSON.stringify(manifest({})));
    expect(bare.ok && Object.keys(bare.manifest.jobs[0]!)).not.toContain('memory_mib');
  });

  it.each([
    [{ pids_limit: 0 }, 'jobs[0].pids_limit', 'must be an integer 16..1048576 (processes and threads)'],
    [{ pids_limit: 64.5 }, 'jobs[0].pids_limit', 'must be an integer 16..1048576 (processes and threads)'],
    [{ memory_mib: 5 }, 'jobs[0].memory_mib', 'must be an integer 6..16777216 (MiB)'],
    [{ memory_mib: '512' }, 'jobs[0].memory_mib', 'must be an integer 6..16777216 (MiB)'],
    [{ cpus: 0 }, 'jobs[0].cpus', 'must be a number 0.001..1024 (CPUs)'],
    [{ cpus: 2000 }, 'jobs[0].cpus', 'must be a number 0.001..1024 (CPUs)'],
    [
      { disk_limit_bytes: 1024 },
      'jobs[0].disk_limit_bytes',
      'must be an integer 1048576..1125899906842624 (bytes)',
    ],
  ])('refuses %j naming the field and the rule', (extra, path, rule) => {
    expect(issuesOf(extra)).toContainEqual({ path, rule });
  });

  it('the pair run spec takes the same fields with the same rules', () => {
    const spec = { ...job, image: 'i', memory_mib: 3 };
    const parsed = parsePairSpec(spec);
    expect(parsed.ok).toBe(false);
    expect(!parsed.ok && parsed.issues.map((i) => i.path)).toEqual(['memory_mib']);
    const good = parsePairSpec({ ...job, image: 'i', pids_limit: 64, disk_limit_bytes: 2 ** 20 });
    expect(good.ok && good.spec.pids_limit).toBe(64);
  });
});

describe('limitDefaults', () => {
  it('shares the host memory less the reserve among the pairs allowed at once, and half the free disk', () => {
    const d = limitDefaults({ memoryTotalBytes: 24 * GIB, outputFreeBytes: 80 * GIB, maxConcurrentPairs: 2 });
    // reserve = 10 % of 24 GiB = 2.4 GiB; (24 − 2.4) GiB / 2 = 10.8 GiB = 11059 MiB (floored).
    expect(d.memory_mib).toBe(Math.floor((24 * GIB - Math.floor((24 * GIB) / 10)) / 2 / 2 ** 20));
    expect(d.disk_limit_bytes).toBe(20 * GIB);
    expect(d.pids_limit).toBe(DEFAULT_PIDS_LIMIT);
    expect(d.basis).toContain('2 pair(s)');
  });

  it('keeps at least 1 GiB and at most 8 GiB for the supervisor and the system', () => {
    expect(
      limitDefaults({ memoryTotalBytes: 4 * GIB, outputFreeBytes: 0, maxConcurrentPairs: 1 }).memory_mib,
    ).toBe(3 * 1024);
    expect(
      limitDefaults({ memoryTotalBytes: 512 * GIB, outputFreeBytes: 0, maxConcurrentPairs: 1 }).memory_mib,
    ).toBe(504 * 1024);
  });

  it('never goes under 256 MiB on a tiny host, and uses fixed fallbacks when the host is unknown', () => {
    expect(
      limitDefaults({ memoryTotalBytes: GIB, outputFreeBytes: 0, maxConcurrentPairs: 2 }).memory_mib,
    ).toBe(MIN_DEFAULT_MEMORY_MIB);
    const unknown = limitDefaults({ memoryTotalBytes: null, outputFreeBytes: null, maxConcurrentPairs: 1 });
    expect(unknown).toMatchObject({
      memory_mib: FALLBACK_MEMORY_MIB,
      disk_limit_bytes: FALLBACK_DISK_LIMIT_BYTES,
    });
    expect(unknown.basis).toContain('unknown');
  });

  it('a job field wins over its default; cpus has no default', () => {
    const d = limitDefaults({ memoryTotalBytes: 8 * GIB, outputFreeBytes: 10 * GIB, maxConcurrentPairs: 1 });
    expect(effectiveLimits({ memory_mib: 64 }, d)).toEqual({
      pids_limit: DEFAULT_PIDS_LIMIT,
      memory_mib: 64,
      cpus: null,
      disk_limit_bytes: 5 * GIB,
    });
    expect(effectiveLimits({ pids_limit: 64, cpus: 0.5, disk_limit_bytes: 2 ** 20 }, d)).toMatchObject({
      pids_limit: 64,
      cpus: 0.5,
      disk_limit_bytes: 2 ** 20,
    });
  });
});

describe('containerLimitsOf', () => {
  it('sets swap equal to memory, nofile and nproc ulimits, and a CPU quota only when asked', () => {
    const c = containerLimitsOf({ pids_limit: 64, memory_mib: 32, cpus: null });
    expect(c).toEqual({
      pidsLimit: 64,
      memoryBytes: 32 * 2 ** 20,
      memorySwapBytes: 32 * 2 ** 20,
      ulimits: [
        { name: 'nofile', soft: 16384, hard: 16384 },
        { name: 'nproc', soft: 64, hard: 64 },
      ],
    });
    expect(containerLimitsOf({ pids_limit: 64, memory_mib: 32, cpus: 1.5 }).nanoCpus).toBe(1_500_000_000);
  });

  it('keeps only the documented capabilities', () => {
    expect([...PAIR_CAPABILITIES]).toEqual(['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID', 'KILL']);
  });
});

describe('serve sessions take the same limit fields', () => {
  const body = { image: 'i' };

  it('memory_mb is still accepted as the former name of memory_mib; both at once is refused naming memory_mb', () => {
    expect(SessionCreateSchema.safeParse({ ...body, memory_mb: 64 }).success).toBe(true);
    const both = SessionCreateSchema.safeParse({ ...body, memory_mb: 64, memory_mib: 64 });
    expect(both.success).toBe(false);
    expect(both.error?.issues.map((i) => [i.path.join('.'), i.message])).toEqual([
      ['memory_mb', 'give only one of memory_mib and memory_mb (its former name)'],
    ]);
    const bad = SessionCreateSchema.safeParse({ ...body, pids_limit: 3 });
    expect(bad.error?.issues.map((i) => [i.path.join('.'), i.message])).toEqual([
      ['pids_limit', 'must be an integer 16..1048576 (processes and threads)'],
    ]);
  });

  it('a session that asks for nothing gets the defaults: pids 4096, memory from the host, no swap beyond it', () => {
    const defaults = limitDefaults({
      memoryTotalBytes: 16 * GIB,
      outputFreeBytes: null,
      maxConcurrentPairs: 1,
    });
    const limits = sessionLimits(SessionCreateSchema.parse(body), defaults);
    expect(limits).toMatchObject({
      pidsLimit: 4096,
      memoryBytes: defaults.memory_mib * 2 ** 20,
      memorySwapBytes: defaults.memory_mib * 2 ** 20,
    });
    expect(limits.nanoCpus).toBeUndefined();
    const asked = sessionLimits(
      SessionCreateSchema.parse({ ...body, memory_mb: 100, cpus: 0.5, pids_limit: 32 }),
      defaults,
    );
    expect(asked).toMatchObject({ pidsLimit: 32, memoryBytes: 100 * 2 ** 20, nanoCpus: 500_000_000 });
  });
});

describe('doctor: pair limits', () => {
  const unknown = { kind: 'unknown', reason: 'not asked' } as const;
  const facts = (freeBytes: number): HostFactsRecord => ({
    cpu: unknown,
    memory: { kind: 'known', total_bytes: 8 * GIB, available_bytes: 6 * GIB },
    os: unknown,
    output_fs: {
      kind: 'known',
      path: '/out',
      fs: '/dev/vda',
      type: 'ext4',
      mount: '/',
      size_bytes: 100 * GIB,
      free_bytes: freeBytes,
    },
    engine_data_root_fs: unknown,
    gpu_controllers: unknown,
  });

  it('shows the defaults a job without limits gets here, and warns when the disk default is under 1 GiB', () => {
    const roomy = pairLimitsCheck(facts(40 * GIB));
    expect(roomy).toMatchObject({ status: 'ok', name: 'pair limits' });
    expect(roomy.detail).toContain(`memory ${7 * 1024} MiB`);
    const tight = pairLimitsCheck(facts(GIB));
    expect(tight.status).toBe('warn');
    expect(tight.fix).toContain('disk_limit_bytes');
  });
});
