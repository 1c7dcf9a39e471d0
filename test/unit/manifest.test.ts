import { describe, expect, it } from 'vitest';
import type { Issue } from '../../src/core/errors.js';
import {
  DEFAULT_SESSIONS_DIR,
  DEFAULT_STOP_BUDGET_SECONDS,
  DEFAULT_TIMEOUT_SECONDS,
  MANIFEST_SCHEMA_ID,
} from '../../src/core/manifest/constants.js';
import { jobImage, parseManifest } from '../../src/core/manifest/parse.js';

const HEX = 'ab'.repeat(32);

/** SPEC §3's example, complete. */
function fullManifest() {
  return {
    schema: MANIFEST_SCHEMA_ID,
    image: 'pair-driver:1',
    jobs: [
      {
        job_id: 'pair-0001',
        argv: ['/opt/driver/run', '--pair', '0001'],
        cwd: '/abs/work/dir',
        outcome_path: '/abs/out/pair-0001.json',
        environment: { MODEL: 'm-1', OPENAI_API_KEY: '${OPENAI_API_KEY}' },
        ports: [41000, 41001, 41002, 41003, 41004, 41005],
        network: 'bridge',
        timeout_seconds: 36060,
        log_limit_bytes: 1073741824,
        image: 'pair-driver:1',
        gpus: 'all',
        b1_ports: true,
        sessions_dir: '/root/.codex/sessions',
      },
    ],
    source_sha256: { '/abs/path/driver.py': HEX },
    capacity: { max_workers: 2, gpu_total_mib: 81559, gpu_baseline_mib: 1200, gpu_fraction: 0.9 },
    provider: { allowed_http_statuses: [502] },
    sessions_dir: '/root/.codex/sessions',
    stop_budget_seconds: 240,
    continuation_of: { batch_id: 'b-1', output: '/abs/old', code_version: '0.1.0+abc123' },
  };
}

function minimalManifest() {
  return {
    schema: MANIFEST_SCHEMA_ID,
    image: 'pair-driver:1',
    jobs: [
      { job_id: 'pair-0001', argv: ['/opt/driver/run'], cwd: '/work', outcome_path: '/out/pair-0001.json' },
    ],
  };
}

function issuesOf(value: unknown): Issue[] {
  const parsed = parseManifest(JSON.stringify(value));
  if (parsed.ok) throw new Error('expected the manifest to be rejected');
  return parsed.issues;
}

function expectIssue(value: unknown, path: string, rule: RegExp): void {
  expect(issuesOf(value)).toContainEqual({ path, rule: expect.stringMatching(rule) });
}

describe('parseManifest: valid manifests', () => {
  it('accepts SPEC §3 example and round-trips it unchanged', () => {
    const parsed = parseManifest(JSON.stringify(fullManifest()));
    expect(parsed).toEqual({ ok: true, manifest: fullManifest() });
    if (!parsed.ok) return;
    expect(parseManifest(JSON.stringify(parsed.manifest))).toEqual(parsed);
  });

  it('applies defaults to a minimal manifest', () => {
    const parsed = parseManifest(JSON.stringify(minimalManifest()));
    expect(parsed.ok).toBe(true);
    if (!parsed.ok) return;
    const { manifest } = parsed;
    expect(manifest.capacity).toEqual({ max_workers: 1 });
    expect(manifest.sessions_dir).toBe(DEFAULT_SESSIONS_DIR);
    expect(manifest.stop_budget_seconds).toBe(DEFAULT_STOP_BUDGET_SECONDS);
    expect(manifest.source_sha256).toEqual({});
    expect(manifest.provider).toBeUndefined();
    expect(manifest.continuation_of).toBeUndefined();
    expect(manifest.jobs[0]).toEqual({
      job_id: 'pair-0001',
      argv: ['/opt/driver/run'],
      cwd: '/work',
      outcome_path: '/out/pair-0001.json',
      environment: {},
      ports: [],
      network: 'bridge',
      timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
      log_limit_bytes: 1024 ** 3,
      b1_ports: false,
    });
  });

  it('preserves job order', () => {
    const base = minimalManifest();
    const m = {
      ...base,
      jobs: ['c', 'a', 'b'].map((id) => ({ ...base.jobs[0]!, job_id: id, outcome_path: `/out/${id}.json` })),
    };
    const parsed = parseManifest(JSON.stringify(m));
    expect(parsed.ok && parsed.manifest.jobs.map((j) => j.job_id)).toEqual(['c', 'a', 'b']);
  });

  it('defaults provider.allowed_http_statuses to none', () => {
    const parsed = parseManifest(JSON.stringify({ ...minimalManifest(), provider: {} }));
    expect(parsed.ok && parsed.manifest.provider).toEqual({ allowed_http_statuses: [] });
  });
});

describe('parseManifest: top-level rules', () => {
  it('reports invalid JSON at $ without echoing the text', () => {
    const parsed = parseManifest('{"schema": "x", "environment": {"K": sk-live-123}}');
    expect(parsed.ok).toBe(false);
    if (parsed.ok) return;
    expect(parsed.issues).toEqual([{ path: '$', rule: expect.stringMatching(/not valid JSON/) }]);
    expect(JSON.stringify(parsed.issues)).not.toContain('sk-live-123');
  });

  it('rejects a root that is not an object', () => {
    expectIssue([], '$', /must be an object/);
  });

  it('requires schema to equal the id', () => {
    expectIssue(
      { ...minimalManifest(), schema: 'roboguide.e1.batch/v0.2' },
      'schema',
      /must be "roboguide\.e1\.batch\/v0\.1"/,
    );
    const { schema: _schema, ...rest } = minimalManifest();
    expectIssue(rest, 'schema', /must be/);
  });

  it('requires a non-empty jobs array', () => {
    expectIssue({ ...minimalManifest(), jobs: [] }, 'jobs', /at least one job/);
    const { jobs: _jobs, ...rest } = minimalManifest();
    expectIssue(rest, 'jobs', /is required/);
  });

  it('rejects unknown keys at the root and in every nested object', () => {
    const m = fullManifest();
    const bad = {
      ...m,
      jbos: [],
      jobs: [{ ...m.jobs[0]!, timout_seconds: 5 }],
      capacity: { ...m.capacity, max_worker: 2 },
      provider: { ...m.provider, allowed: [] },
      continuation_of: { ...m.continuation_of, batch: 'x' },
    };
    const issues = issuesOf(bad);
    expect(issues).toHaveLength(5);
    expect(issues).toEqual(
      expect.arrayContaining([
        { path: '$', rule: 'unknown key "jbos" (did you mean "jobs"?)' },
        { path: 'jobs[0]', rule: 'unknown key "timout_seconds" (did you mean "timeout_seconds"?)' },
        { path: 'capacity', rule: 'unknown key "max_worker" (did you mean "max_workers"?)' },
        { path: 'provider', rule: 'unknown key "allowed"' },
        { path: 'continuation_of', rule: 'unknown key "batch"' },
      ]),
    );
  });

  it('requires an image for every job, from the job or the top level', () => {
    const { image: _image, jobs, ...rest } = minimalManifest();
    const own = { ...jobs[0]!, job_id: 'pair-0002', outcome_path: '/out/2.json', image: 'own:1' };
    const m = { ...rest, jobs: [jobs[0]!, own] };
    expect(issuesOf(m)).toEqual([{ path: 'jobs[0].image', rule: expect.stringMatching(/is required/) }]);
    expectIssue({ ...minimalManifest(), image: '' }, 'image', /must not be empty/);
  });

  it('jobImage prefers the job override, then the top-level default', () => {
    const parsed = parseManifest(JSON.stringify(minimalManifest()));
    if (!parsed.ok) throw new Error('expected valid');
    const job = parsed.manifest.jobs[0]!;
    expect(jobImage(parsed.manifest, job)).toBe('pair-driver:1');
    expect(jobImage(parsed.manifest, { ...job, image: 'own:2' })).toBe('own:2');
    expect(() => jobImage({}, job)).toThrow(/no image/);
  });

  it('checks sessions_dir and stop_budget_seconds', () => {
    expectIssue({ ...minimalManifest(), sessions_dir: 'rel/sessions' }, 'sessions_dir', /absolute path/);
    expectIssue({ ...minimalManifest(), stop_budget_seconds: 0 }, 'stop_budget_seconds', /1\.\.3600/);
    expectIssue({ ...minimalManifest(), stop_budget_seconds: 3601 }, 'stop_budget_seconds', /1\.\.3600/);
    expectIssue({ ...minimalManifest(), stop_budget_seconds: 2.5 }, 'stop_budget_seconds', /integer/);
  });

  it('checks source_sha256 keys and values', () => {
    const bad = {
      'rel/driver.py': HEX,
      '/abs/a.py': HEX.toUpperCase(),
      '/abs/b.py': 'abc',
      '/abs/.env': HEX,
    };
    const issues = issuesOf({ ...minimalManifest(), source_sha256: bad });
    expect(issues).toEqual([
      { path: 'source_sha256["rel/driver.py"]', rule: 'must be an absolute path' },
      { path: 'source_sha256["/abs/a.py"]', rule: expect.stringMatching(/64 lower-case hex/) },
      { path: 'source_sha256["/abs/b.py"]', rule: expect.stringMatching(/64 lower-case hex/) },
      { path: 'source_sha256["/abs/.env"]', rule: expect.stringMatching(/credential/) },
    ]);
  });

  it('checks provider.allowed_http_statuses', () => {
    const issues = issuesOf({
      ...minimalManifest(),
      provider: { allowed_http_statuses: [99, 600, 502, 502, 4.5] },
    });
    expect(issues).toEqual([
      { path: 'provider.allowed_http_statuses[0]', rule: expect.stringMatching(/100\.\.599/) },
      { path: 'provider.allowed_http_statuses[1]', rule: expect.stringMatching(/100\.\.599/) },
      { path: 'provider.allowed_http_statuses[4]', rule: expect.stringMatching(/100\.\.599/) },
    ]);
    expectIssue(
      { ...minimalManifest(), provider: { allowed_http_statuses: [502, 502] } },
      'provider.allowed_http_statuses[1]',
      /twice/,
    );
  });

  it('checks continuation_of fields', () => {
    expect(
      issuesOf({ ...minimalManifest(), continuation_of: { batch_id: '', output: 'old', code_version: '' } }),
    ).toEqual([
      { path: 'continuation_of.batch_id', rule: 'must not be empty' },
      { path: 'continuation_of.output', rule: 'must be an absolute path' },
      { path: 'continuation_of.code_version', rule: 'must not be empty' },
    ]);
  });
});

describe('parseManifest: capacity', () => {
  const withCapacity = (capacity: unknown) => ({ ...minimalManifest(), capacity });

  it('accepts max_workers 1 without GPU fields, defaulting max_workers', () => {
    const parsed = parseManifest(JSON.stringify(withCapacity({})));
    expect(parsed.ok && parsed.manifest.capacity).toEqual({ max_workers: 1 });
  });

  it('rejects max_workers other than 1 or 2', () => {
    expectIssue(withCapacity({ max_workers: 3 }), 'capacity.max_workers', /must be 1 or 2/);
  });

  const GPU_RULE =
    "is required when max_workers is 2 and the batch uses GPUs (a job's gpus or gpu_mib, or a GPU field here)";
  it('requires the three GPU fields when max_workers is 2 and a GPU field is given', () => {
    expect(issuesOf(withCapacity({ max_workers: 2, gpu_fraction: 0.9 }))).toEqual([
      { path: 'capacity.gpu_total_mib', rule: GPU_RULE },
      { path: 'capacity.gpu_baseline_mib', rule: GPU_RULE },
    ]);
  });

  it('requires the three GPU fields when max_workers is 2 and a job asks for GPUs', () => {
    const base = minimalManifest();
    const manifest = { ...base, capacity: { max_workers: 2 }, jobs: [{ ...base.jobs[0]!, gpu_mib: 1000 }] };
    expect(issuesOf(manifest).map((i) => i.path)).toEqual([
      'capacity.gpu_total_mib',
      'capacity.gpu_baseline_mib',
      'capacity.gpu_fraction',
    ]);
  });

  it('accepts max_workers 2 without GPU fields for a batch that declares no GPUs (issue 40: CPU-only)', () => {
    const parsed = parseManifest(JSON.stringify(withCapacity({ max_workers: 2 })));
    expect(parsed.ok && parsed.manifest.capacity).toEqual({ max_workers: 2 });
  });

  it('checks GPU field ranges', () => {
    const capacity = { max_workers: 2, gpu_total_mib: 0, gpu_baseline_mib: -1, gpu_fraction: 1.01 };
    expect(issuesOf(withCapacity(capacity)).map((i) => i.path)).toEqual([
      'capacity.gpu_total_mib',
      'capacity.gpu_baseline_mib',
      'capacity.gpu_fraction',
    ]);
    expectIssue(withCapacity({ gpu_fraction: 0 }), 'capacity.gpu_fraction', /\(0, 1\]/);
  });
});

describe('parseManifest: reports every problem at once', () => {
  it('lists five different problems with their paths', () => {
    const m = fullManifest();
    const first = m.jobs[0]!;
    const bad = {
      ...m,
      jobs: [
        { ...first, cwd: 'relative/dir', timout_seconds: 10 }, // 1, 2
        {
          ...first,
          job_id: 'pair-0002',
          outcome_path: '/abs/out/pair-0002.json',
          ports: [42000],
          environment: { API_TOKEN: 'sk-literal-value' }, // 3
          b1_ports: true, // 4 (one port only)
        },
      ],
      capacity: { ...m.capacity, gpu_fraction: 2 }, // 5
    };
    const issues = issuesOf(bad);
    expect(issues.map((i) => i.path).sort()).toEqual(
      [
        'capacity.gpu_fraction',
        'jobs[0]',
        'jobs[0].cwd',
        'jobs[1].b1_ports',
        'jobs[1].environment.API_TOKEN',
      ].sort(),
    );
    expect(JSON.stringify(issues)).not.toContain('sk-literal-value');
  });
});

describe('log_limit_bytes', () => {
  it('defaults to 1 GiB per stream on every job, and a pair spec takes it too', () => {
    const parsed = parseManifest(JSON.stringify(minimalManifest()));
    expect(parsed.ok && parsed.manifest.jobs[0]?.log_limit_bytes).toBe(1024 ** 3);
  });

  it.each([[0], [65_535], [1.5], ['64m'], [1024 ** 4 + 1]])(
    'refuses %j with the field path and the rule',
    (value) => {
      const manifest = minimalManifest();
      expectIssue(
        { ...manifest, jobs: [{ ...manifest.jobs[0], log_limit_bytes: value }] },
        'jobs[0].log_limit_bytes',
        /must be an integer 65536\.\.1099511627776 \(bytes per stream\)/,
      );
    },
  );
});
