import { describe, expect, it } from 'vitest';
import type { Issue } from '../../src/core/errors.js';
import { MANIFEST_SCHEMA_ID } from '../../src/core/manifest/constants.js';
import { parseManifest } from '../../src/core/manifest/parse.js';

function job(id: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { job_id: id, argv: ['/opt/driver/run'], cwd: '/work', outcome_path: `/out/${id}.json`, ...extra };
}

function manifestWith(...jobs: Record<string, unknown>[]): Record<string, unknown> {
  return { schema: MANIFEST_SCHEMA_ID, image: 'pair-driver:1', jobs };
}

function issuesOf(value: unknown): Issue[] {
  const parsed = parseManifest(JSON.stringify(value));
  if (parsed.ok) throw new Error('expected the manifest to be rejected');
  return parsed.issues;
}

/** One job with `extra` fields must be rejected with exactly this issue. */
function expectOnly(extra: Record<string, unknown>, path: string, rule: RegExp): void {
  expect(issuesOf(manifestWith(job('a', extra)))).toEqual([{ path, rule: expect.stringMatching(rule) }]);
}

function accepts(...jobs: Record<string, unknown>[]): boolean {
  return parseManifest(JSON.stringify(manifestWith(...jobs))).ok;
}

describe('job_id', () => {
  it('accepts [A-Za-z0-9._-]{1,128}', () => {
    expect(accepts(job('Pair_0.1-x'), job('z'.repeat(128)))).toBe(true);
  });

  it('accepts dotted names that are still a single safe segment', () => {
    expect(accepts(job('...'), job('.a'), job('a..b'))).toBe(true);
  });

  it.each(['', 'a b', 'a/b', 'é', 'x'.repeat(129), '.', '..'])('rejects %j', (id) => {
    expectOnly({ job_id: id }, 'jobs[0].job_id', /\[A-Za-z0-9\._-\]\{1,128\}/);
  });

  it('must be unique', () => {
    const issues = issuesOf(
      manifestWith(job('a'), job('b'), { ...job('a'), outcome_path: '/out/other.json' }),
    );
    expect(issues).toEqual([{ path: 'jobs[2].job_id', rule: 'job_id is also used by jobs[0] (a)' }]);
  });
});

describe('argv, cwd, outcome_path', () => {
  it('argv must be a non-empty array of strings with a non-empty program', () => {
    expectOnly({ argv: [] }, 'jobs[0].argv', /non-empty array/);
    expectOnly({ argv: 'run.sh' }, 'jobs[0].argv', /must be an array/);
    expectOnly({ argv: ['/bin/x', 3] }, 'jobs[0].argv[1]', /must be a string/);
    expectOnly({ argv: ['', 'x'] }, 'jobs[0].argv[0]', /must not be empty/);
  });

  it('cwd must be absolute', () => {
    expectOnly({ cwd: 'work' }, 'jobs[0].cwd', /^must be an absolute path$/);
    expectOnly({ cwd: undefined }, 'jobs[0].cwd', /^is required$/);
  });

  it('outcome_path must be an absolute file path', () => {
    expectOnly({ outcome_path: 'out/a.json' }, 'jobs[0].outcome_path', /absolute path/);
    expectOnly({ outcome_path: '/out/' }, 'jobs[0].outcome_path', /not a directory/);
  });

  it('outcome_path must be unique across jobs, naming the other job', () => {
    const issues = issuesOf(manifestWith(job('a'), { ...job('b'), outcome_path: '/out/a.json' }));
    expect(issues).toEqual([
      { path: 'jobs[1].outcome_path', rule: 'outcome_path is also used by jobs[0] (a)' },
    ]);
  });
});

describe('environment', () => {
  it('accepts literals under public names and whole-value references', () => {
    expect(
      accepts(job('a', { environment: { MODEL: 'm-1', OPENAI_API_KEY: '${OPENAI_API_KEY}', _x: '$HOME' } })),
    ).toBe(true);
  });

  it('rejects invalid and reserved names', () => {
    expectOnly(
      { environment: { '1BAD': 'x' } },
      'jobs[0].environment["1BAD"]',
      /valid environment variable name/,
    );
    expectOnly(
      { environment: { 'A-B': 'x' } },
      'jobs[0].environment["A-B"]',
      /valid environment variable name/,
    );
    expectOnly(
      { environment: { ROBOGUIDE_JOB_ID: 'x' } },
      'jobs[0].environment.ROBOGUIDE_JOB_ID',
      /reserved/,
    );
  });

  it('rejects references that are not the whole value', () => {
    for (const value of ['Bearer ${TOKEN}', '${A}${B}', '${A', '${}', '${1X}']) {
      expectOnly({ environment: { HEADER: value } }, 'jobs[0].environment.HEADER', /whole value/);
    }
  });

  it('rejects non-string values', () => {
    expectOnly({ environment: { PORT: 8080 } }, 'jobs[0].environment.PORT', /must be a string/);
  });

  it.each([
    'OPENAI_API_KEY',
    'github_token',
    'ClientSecret',
    'DB_PASSWORD',
    'PASSWD',
    'AWS_CREDENTIALS',
    'AUTH_HEADER',
    'COOKIE',
  ])('rejects a literal under the secret-looking name %s without echoing it', (name) => {
    const issues = issuesOf(manifestWith(job('a', { environment: { [name]: 'hunter2-literal' } })));
    expect(issues).toEqual([
      { path: `jobs[0].environment.${name}`, rule: expect.stringMatching(/secret-looking/) },
    ]);
    expect(JSON.stringify(issues)).not.toContain('hunter2-literal');
  });
});

describe('ports', () => {
  it('must be integers 1..65535', () => {
    for (const port of [0, 65536, 1.5, -1, '80']) {
      expectOnly({ ports: [80, port] }, 'jobs[0].ports[1]', /integer 1\.\.65535/);
    }
  });

  it('must be unique within a job', () => {
    expectOnly({ ports: [80, 81, 80] }, 'jobs[0].ports[2]', /port 80 is listed twice/);
  });

  it('must be disjoint across all jobs, naming both jobs', () => {
    const issues = issuesOf(
      manifestWith(
        job('a', { ports: [41000, 41003] }),
        job('b', { ports: [42000] }),
        job('c', { ports: [41003] }),
      ),
    );
    expect(issues).toEqual([{ path: 'jobs[2].ports[0]', rule: 'port 41003 is also used by jobs[0] (a)' }]);
  });

  it('reports overlaps even when another field of the job is invalid', () => {
    const issues = issuesOf(
      manifestWith(job('a', { ports: [41000] }), job('b', { ports: [41000], cwd: 'rel' })),
    );
    expect(issues.map((i) => i.path).sort()).toEqual(['jobs[1].cwd', 'jobs[1].ports[0]']);
  });
});

describe('timeout_seconds, image, gpus, b1_ports, sessions_dir', () => {
  it('timeout_seconds is an integer 1..172800', () => {
    expect(accepts(job('a', { timeout_seconds: 1 }), job('b', { timeout_seconds: 172800 }))).toBe(true);
    for (const timeout of [0, 172801, 60.5, '60']) {
      expectOnly({ timeout_seconds: timeout }, 'jobs[0].timeout_seconds', /1\.\.172800/);
    }
  });

  it('image override must be a non-empty string', () => {
    expectOnly({ image: '' }, 'jobs[0].image', /must not be empty/);
  });

  it('gpus accepts "all", a count and a device list', () => {
    expect(
      accepts(job('a', { gpus: 'all' }), job('b', { gpus: 2 }), job('c', { gpus: ['0', 'GPU-1234abcd'] })),
    ).toBe(true);
  });

  it('gpus rejects bad values', () => {
    expectOnly({ gpus: 0 }, 'jobs[0].gpus', /count must be an integer ≥ 1/);
    expectOnly({ gpus: 1.5 }, 'jobs[0].gpus', /"all", a GPU count/);
    expectOnly({ gpus: 'none' }, 'jobs[0].gpus', /"all", a GPU count/);
    expectOnly({ gpus: [] }, 'jobs[0].gpus', /must not be empty/);
    expectOnly({ gpus: ['0', ''] }, 'jobs[0].gpus[1]', /must not be empty/);
    expectOnly({ gpus: ['0', '0'] }, 'jobs[0].gpus[1]', /listed twice/);
  });

  it('b1_ports must be a boolean and needs exactly six ports', () => {
    const six = [41000, 41001, 41002, 41003, 41004, 41005];
    expect(accepts(job('a', { b1_ports: true, ports: six }))).toBe(true);
    expectOnly({ b1_ports: 'yes', ports: six }, 'jobs[0].b1_ports', /must be a boolean/);
    expectOnly(
      { b1_ports: true, ports: six.slice(0, 5) },
      'jobs[0].b1_ports',
      /exactly 6 ports; the job has 5/,
    );
    expectOnly({ b1_ports: true }, 'jobs[0].b1_ports', /exactly 6 ports; the job has 0/);
  });

  it('sessions_dir must be an absolute container path', () => {
    expectOnly({ sessions_dir: '.codex/sessions' }, 'jobs[0].sessions_dir', /absolute path/);
  });
});
