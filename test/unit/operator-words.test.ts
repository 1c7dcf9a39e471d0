/**
 * Issue 40, the words: why a pair or batch stopped and what to run next, manifest errors grouped and hinted, the
 * report's glyphs. Pure functions and the real report renderer; the CLI end to end is test/e2e/operator-words.e2e.
 */
import { describe, expect, it } from 'vitest';
import { humanLogLine, stderrLogFormat } from '../../src/adapters/stderr-log-format.js';
import { parseManifest } from '../../src/core/manifest/parse.js';
import { groupedByJob } from '../../src/core/manifest/environment.js';
import { batchNextSteps, explainResult, lastLines, shellWord } from '../../src/core/next-steps.js';
import { renderReportHtml } from '../../src/core/report/html.js';
import { buildReportModel } from '../../src/core/report/model.js';
import { RESULT_SCHEMA, type ResultRecord } from '../../src/core/result.js';

const ctx = { bin: '/opt/rg/bin/roboguide-eval', output: './my batch' };

describe('why and next: a pair', () => {
  it('a provider status not allowed names the status and the setting that lets it through', () => {
    const lines = explainResult({
      reasons: ['provider_status_not_allowed'],
      outcome: { e1_attempt: { provider_incidents: [{ http_status: 429, requires_stop: false }] } },
      exit_code: 0,
    });
    expect(lines.join('\n')).toContain('HTTP 429');
    expect(lines.join('\n')).toContain('"provider.allowed_http_statuses": [429]');
  });

  it('an agent that crashed: its exit code, the end of its stderr and where the whole file is', () => {
    const lines = explainResult({
      reasons: ['outcome_missing'],
      outcome: null,
      exit_code: 3,
      stderr_tail: ['Traceback (most recent call last):', "KeyError: 'x'"],
      stderr_path: '/b/jobs/p/stderr.log',
    });
    expect(lines[0]).toContain('the agent exited with code 3 without writing its outcome');
    expect(lines).toContain("  | KeyError: 'x'");
    expect(lines).toContain('its whole stderr: /b/jobs/p/stderr.log');
  });

  it('lastLines keeps the last non-empty lines and drops a partial first line of a tail', () => {
    const bytes = new TextEncoder().encode('tial line\nA\n\nB\nC\n');
    expect(lastLines(bytes, false, 2)).toEqual(['B', 'C']);
    expect(lastLines(bytes, true, 10)).toEqual(['tial line', 'A', 'B', 'C']);
  });
});

describe('why and next: a batch', () => {
  const base = { supervisor: { pid: 7, alive: false }, unfinished: 3 };
  it('a provider pause: why, and resume with the folder as typed (quoted for a shell)', () => {
    const lines = batchNextSteps({ ...base, state: 'paused', pause_reasons: ['provider'] }, ctx);
    expect(lines[0]).toMatch(/^why \(provider\): /);
    expect(lines).toContain(
      "next: fix what the reason names, then /opt/rg/bin/roboguide-eval e1-batch resume --output './my batch'",
    );
  });

  it('an orphaned supervisor (killed, no reason recorded) says so and names resume', () => {
    const lines = batchNextSteps({ ...base, state: 'paused', pause_reasons: [] }, ctx);
    expect(lines[0]).toContain('the supervisor (pid 7) is not running and recorded no pause reason');
    expect(lines[1]).toContain('e1-batch resume --output');
  });

  it('stopped: resume; fatal: continuation (resume keeps it); drained: report', () => {
    expect(batchNextSteps({ ...base, state: 'stopped', pause_reasons: [] }, ctx).join('\n')).toContain(
      'e1-batch resume',
    );
    expect(batchNextSteps({ ...base, state: 'paused', pause_reasons: ['fatal'] }, ctx).join('\n')).toContain(
      'e1-batch continuation',
    );
    expect(batchNextSteps({ ...base, state: 'drained', pause_reasons: [], unfinished: 0 }, ctx)).toEqual([
      "next: /opt/rg/bin/roboguide-eval e1-batch report --output './my batch'   (every job has a result)",
    ]);
  });

  it('shellWord leaves plain paths as typed and quotes the rest', () => {
    expect(shellWord('/abs/batch-1')).toBe('/abs/batch-1');
    expect(shellWord("it's here")).toBe("'it'\\''s here'");
  });
});

describe('manifest errors: grouped, hinted', () => {
  function issuesOf(manifest: unknown): string[] {
    const parsed = parseManifest(JSON.stringify(manifest));
    return parsed.ok ? [] : parsed.issues.map((i) => `${i.path}: ${i.rule}`);
  }
  const job = (id: string, extra: Record<string, unknown> = {}) => ({
    job_id: id,
    argv: ['/x'],
    cwd: '/tmp',
    outcome_path: `/tmp/out/${id}.json`,
    timeout_seconds: 60,
    ...extra,
  });

  it('timeout_secs: did you mean timeout_seconds', () => {
    const { timeout_seconds: _drop, ...rest } = job('a');
    void _drop;
    expect(
      issuesOf({ schema: 'roboguide.e1.batch/v0.1', image: 'i', jobs: [{ ...rest, timeout_secs: 5 }] }),
    ).toContain('jobs[0]: unknown key "timeout_secs" (did you mean "timeout_seconds"?)');
  });

  it('a top-level max_workers belongs under capacity', () => {
    expect(
      issuesOf({ schema: 'roboguide.e1.batch/v0.1', image: 'i', max_workers: 2, jobs: [job('a')] }),
    ).toContain('$: unknown key "max_workers" here (it belongs under "capacity")');
  });

  it('"$HF_TOKEN" for a secret: did you mean "${HF_TOKEN}"', () => {
    const issues = issuesOf({
      schema: 'roboguide.e1.batch/v0.1',
      image: 'i',
      jobs: [job('a', { environment: { HF_TOKEN: '$HF_TOKEN' } })],
    });
    expect(issues.join('\n')).toContain('(did you mean "${HF_TOKEN}"?)');
  });

  it('one rule met by many jobs is one line, the jobs counted and the first named', () => {
    const issues = Array.from({ length: 17 }, (_, i) => ({
      path: `jobs[${i}].environment.OPENAI_API_KEY`,
      rule: 'references ${NU_OPENAI_KEY}, which is not set or empty',
    }));
    const ids = Array.from({ length: 17 }, (_, i) => `job-${i}`);
    expect(groupedByJob([{ path: '$', rule: 'other' }, ...issues], ids)).toEqual([
      { path: '$', rule: 'other' },
      {
        path: 'jobs[*].environment.OPENAI_API_KEY',
        rule: 'references ${NU_OPENAI_KEY}, which is not set or empty (17 jobs: job-0, job-1, job-2, job-3, job-4, … and 12 more)',
      },
    ]);
  });
});

describe('stderr log lines on a terminal', () => {
  it('text on a terminal, JSON elsewhere, as ROBOGUIDE_LOG_FORMAT says when set; another value refused', () => {
    expect(stderrLogFormat(undefined, true)).toBe('text');
    expect(stderrLogFormat(undefined, false)).toBe('json');
    expect(stderrLogFormat('json', true)).toBe('json');
    expect(() => stderrLogFormat('yaml', true)).toThrow(/ROBOGUIDE_LOG_FORMAT/);
  });

  it('a pino line becomes one inert human line', () => {
    expect(
      humanLogLine(
        '{"level":40,"time":1,"pid":2,"hostname":"h","job":"p\\u001b[31m","msg":"the outcome breaks"}',
      ),
    ).toBe('warning: the outcome breaks (job p\\x1b[31m)\n');
  });
});

describe('report glyphs', () => {
  it('a timed-out pair is marked in words (no ⏱ emoji a headless browser draws as a box); the stop marker is a square', () => {
    const result: ResultRecord = {
      schema: RESULT_SCHEMA,
      job_id: 'p1',
      batch_id: 'b',
      claim_id: 'c',
      classification: 'infrastructure_failure',
      reasons: ['timeout', 'outcome_missing'],
      outcome: null,
      outcome_redactions: 0,
      outcome_sha256: null,
      outcome_problems: [{ path: 'outcome', message: 'no file' }],
      container: { id: 'c', exit_code: 137, timed_out: true, oom_killed: false },
      logs: { stdout: { bytes: 0, closed: true }, stderr: { bytes: 0, closed: true } },
      sessions: { files: 0, bytes: 0, refusals: [] },
      provider_failure: null,
      provider_failure_error_kind: null,
      cleanup: { removed: true, verified_absent: true, attempts: 1 },
      engine_error: null,
      started_at: '2026-01-01T00:00:00.000Z',
      finished_at: '2026-01-01T00:01:00.000Z',
    };
    const html = renderReportHtml(
      buildReportModel({
        batchId: 'b',
        createdAt: '2026-01-01T00:00:00.000Z',
        capacity: { maxWorkers: 1 },
        gpuUnobservable: false,
        journal: [
          { type: 'supervisor_started', at: '2026-01-01T00:00:00.000Z' },
          { type: 'stop_requested', at: '2026-01-01T00:00:30.000Z' },
        ],
        jobs: [
          {
            job_id: 'p1',
            timeout_seconds: 60,
            receipt: { claimed_at: '2026-01-01T00:00:00.000Z', container_id: 'c' },
            result,
            files: ['result.json', 'stderr.log'],
          },
        ],
        supervisorAlive: false,
        now: '2026-01-01T00:02:00.000Z',
      }),
    );
    expect(html).not.toContain('⏱');
    expect(html).toContain('<span class="timed-out">timed out</span>');
    const stop = /<g class="mk mk-stop-requested"[^]*?<\/g>/.exec(html)?.[0] ?? '';
    expect(stop).toContain('<rect ');
    expect(stop).not.toContain('<circle');
    // Stopped at its deadline: exit 137 is our kill, never read as a crash of the agent.
    expect(html).not.toContain('the agent exited with code 137');
  });
});
