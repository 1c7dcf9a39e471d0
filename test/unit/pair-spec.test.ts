import { describe, expect, it } from 'vitest';
import type { Issue } from '../../src/core/errors.js';
import {
  DEFAULT_SESSIONS_DIR,
  DEFAULT_STOP_BUDGET_SECONDS,
  DEFAULT_TIMEOUT_SECONDS,
} from '../../src/core/manifest/constants.js';
import { parsePairSpec } from '../../src/core/manifest/parse.js';

function spec(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    job_id: 'pair-0001',
    argv: ['/opt/driver/run', '--pair', '0001'],
    cwd: '/work',
    outcome_path: '/out/pair-0001.json',
    image: 'pair-driver:1',
    ...extra,
  };
}

function issuesOf(value: unknown): Issue[] {
  const parsed = parsePairSpec(value);
  if (parsed.ok) throw new Error('expected the spec to be rejected');
  return parsed.issues;
}

describe('parsePairSpec', () => {
  it('accepts a minimal spec and applies defaults', () => {
    expect(parsePairSpec(spec())).toEqual({
      ok: true,
      spec: {
        ...spec(),
        environment: {},
        ports: [],
        network: 'bridge',
        timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
        log_limit_bytes: 1024 ** 3,
        b1_ports: false,
        sessions_dir: DEFAULT_SESSIONS_DIR,
        stop_budget_seconds: DEFAULT_STOP_BUDGET_SECONDS,
        allowed_http_statuses: [],
      },
    });
  });

  it('accepts every job field plus sessions_dir, stop_budget_seconds and allowed_http_statuses', () => {
    const full = spec({
      environment: { MODEL: 'm', OPENAI_API_KEY: '${OPENAI_API_KEY}' },
      ports: [41000, 41001, 41002, 41003, 41004, 41005],
      network: 'bridge',
      timeout_seconds: 600,
      log_limit_bytes: 64 * 1024 ** 2,
      gpus: ['GPU-abc'],
      b1_ports: true,
      sessions_dir: '/home/agent/.codex/sessions',
      stop_budget_seconds: 30,
      allowed_http_statuses: [502, 503],
    });
    expect(parsePairSpec(full)).toEqual({ ok: true, spec: full });
  });

  it('requires image (there is no top-level default)', () => {
    const { image: _image, ...rest } = spec();
    expect(issuesOf(rest)).toEqual([{ path: 'image', rule: 'is required' }]);
  });

  it('rejects unknown keys, including manifest-only ones', () => {
    expect(issuesOf(spec({ timout_seconds: 5, capacity: { max_workers: 1 } }))).toEqual([
      { path: '$', rule: 'unknown key "timout_seconds" (did you mean "timeout_seconds"?)' },
      { path: '$', rule: 'unknown key "capacity"' },
    ]);
  });

  it('rejects a non-object', () => {
    expect(issuesOf('spec.json')).toEqual([{ path: '$', rule: 'must be an object' }]);
  });

  it('applies the job rules with root-relative paths', () => {
    const issues = issuesOf(
      spec({
        job_id: 'bad id',
        cwd: 'rel',
        environment: { API_KEY: 'literal-secret' },
        ports: [80, 80],
        b1_ports: true,
        sessions_dir: 'rel',
        stop_budget_seconds: 0,
        allowed_http_statuses: [700],
      }),
    );
    expect(issues.map((i) => i.path).sort()).toEqual(
      [
        'job_id',
        'cwd',
        'environment.API_KEY',
        'ports[1]',
        'b1_ports',
        'sessions_dir',
        'stop_budget_seconds',
        'allowed_http_statuses[0]',
      ].sort(),
    );
    expect(JSON.stringify(issues)).not.toContain('literal-secret');
  });
});
