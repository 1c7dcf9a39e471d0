import { describe, expect, it } from 'vitest';
import { KIND_COLOURS, renderReportHtml } from '../../src/core/report/html.js';
import { buildReportModel } from '../../src/core/report/model.js';
import type { ReportInput, ReportJob } from '../../src/core/report/types.js';
import { RESULT_SCHEMA, type Classification, type ResultRecord } from '../../src/core/result.js';

const T0 = Date.parse('2026-01-01T00:00:00.000Z');
const at = (sec: number): string => new Date(T0 + sec * 1000).toISOString();
const SECRET = 'sk-live-0123456789abcdefSECRET';

function result(jobId: string, classification: Classification, from: number, to: number): ResultRecord {
  return {
    schema: RESULT_SCHEMA,
    job_id: jobId,
    batch_id: 'b1',
    claim_id: `claim-${jobId}`,
    classification,
    reasons: [],
    // Whatever a hostile driver puts in its outcome never reaches the page.
    outcome: {
      job_id: jobId,
      infrastructure_failure: false,
      fatal_failure: false,
      arms: [{ verdict: SECRET }],
      note: `<script>${SECRET}</script>`,
    },
    outcome_redactions: 0,
    outcome_sha256: null,
    container: { id: 'c', exit_code: 0, timed_out: false, oom_killed: false },
    logs: { stdout: { bytes: 1, closed: true }, stderr: { bytes: 1, closed: true } },
    sessions: { files: 0, bytes: 0, refusals: [] },
    provider_failure: null,
    provider_failure_error_kind: null,
    cleanup: { removed: true, verified_absent: true, attempts: 1 },
    engine_error: { kind: 'engine_error', message: SECRET },
    started_at: at(from),
    finished_at: at(to),
  };
}

const KINDS: Classification[] = [
  'completed',
  'infrastructure_failure',
  'fatal',
  'provider_stop',
  'harness_failure',
];

function model(extra: Partial<ReportInput> = {}) {
  const jobs: ReportJob[] = KINDS.map((k, i) => ({
    job_id: `p${i}`,
    timeout_seconds: 60,
    receipt: { claimed_at: at(i * 10), container_id: 'c' },
    result: result(`p${i}`, k, i * 10, i * 10 + 8),
    files: ['receipt.json', 'result.json', 'stderr.log', 'stdout.log'],
  }));
  jobs.push({ job_id: 'p-pending', timeout_seconds: 60, receipt: null, result: null, files: [] });
  return buildReportModel({
    batchId: 'b<1>',
    createdAt: at(0),
    capacity: { maxWorkers: 1 },
    gpuUnobservable: false,
    journal: [{ type: 'paused', at: at(30), reasons: ['fatal'], job_id: 'p2' }],
    jobs,
    supervisorAlive: false,
    now: at(100),
    ...extra,
  });
}

describe('report.html', () => {
  it('has one table row and one timeline bar per claimed pair, coloured by classification', () => {
    const html = renderReportHtml(model());
    for (const [i, k] of KINDS.entries()) {
      expect(html).toContain(`<tr class="k-${k}" data-job="p${i}">`);
      expect(html).toMatch(new RegExp(`<rect class="pair k-${k}" data-job="p${i}"`));
      expect(html).toContain(`.k-${k}{fill:${KIND_COLOURS[k]}}`);
    }
    expect(html).toContain('<tr class="k-pending" data-job="p-pending">');
    expect(html).not.toMatch(/<rect class="pair k-pending"/);
    expect(html).toContain('<a href="jobs/p0/stdout.log">stdout</a>');
  });

  it('is self-contained: no URL to fetch, a policy that forbids fetching, no external resource', () => {
    const html = renderReportHtml(model());
    expect(html).toContain(`content="default-src 'none'`);
    expect(html).not.toMatch(/https?:\/\//i);
    expect(html).not.toMatch(/<(link|img|iframe|object)\b/i);
    expect(html).not.toMatch(/src=/i);
  });

  it('escapes what it prints and carries nothing of the outcome or engine messages', () => {
    const html = renderReportHtml(model());
    expect(html).toContain('b&lt;1&gt;');
    expect(html).not.toContain('b<1>');
    expect(html).not.toContain(SECRET);
  });

  it('prefixes evidence links with the link base when written outside the batch folder', () => {
    const html = renderReportHtml(model(), { linkBase: '../batch/' });
    expect(html).toContain('<a href="../batch/jobs/p1/result.json">result</a>');
  });

  it('refreshes itself in the browser only while the batch runs', () => {
    expect(renderReportHtml(model())).not.toContain('http-equiv="refresh"');
    const live = model({
      supervisorAlive: true,
      journal: [],
      jobs: [
        {
          job_id: 'p',
          timeout_seconds: 5,
          receipt: { claimed_at: at(1), container_id: null },
          result: null,
          files: [],
        },
      ],
    });
    expect(live.state).toBe('running');
    expect(renderReportHtml(live)).toContain('http-equiv="refresh"');
  });

  it('shows the pause with its reason on the timeline and in the header', () => {
    const html = renderReportHtml(model());
    expect(html).toMatch(/<rect class="pause"[^>]*><title>paused [^<]*fatal \(after p2\)<\/title>/);
    expect(html).toContain('paused now: fatal');
  });

  it('names the broken outcome rules in the pair row, links the outcome copy and explains stop/resume in the legend', () => {
    const broken: ReportJob = {
      job_id: 'p-broken',
      timeout_seconds: 60,
      receipt: { claimed_at: at(60), container_id: 'c', private_outcome: 'outcome/outcome.json' },
      result: {
        ...result('p-broken', 'infrastructure_failure', 60, 62),
        reasons: ['outcome_invalid'],
        outcome_sha256: 'a'.repeat(64),
        outcome_problems: [
          { path: 'fatal_failure', message: 'is required (true or false; there is no default)' },
        ],
      },
      files: ['outcome', 'receipt.json', 'result.json'],
    };
    const html = renderReportHtml(
      buildReportModel({
        batchId: 'b',
        createdAt: at(0),
        capacity: { maxWorkers: 1 },
        gpuUnobservable: false,
        journal: [{ type: 'stop_requested', at: at(61) }],
        jobs: [broken],
        supervisorAlive: false,
        now: at(100),
      }),
    );
    const row = /<tr class="k-infrastructure_failure" data-job="p-broken">.*<\/tr>/.exec(html)?.[0] ?? '';
    expect(row).toContain(
      'outcome_invalid<ul class="problems"><li>fatal_failure: is required (true or false; there is no default)</li></ul>',
    );
    expect(row).toContain('<a href="jobs/p-broken/outcome/outcome.json">outcome</a>');
    expect(html).toContain('stop requested (e1-batch stop; square, dashed line)</span>');
    expect(html).toContain('supervisor start (first start or resume; filled) / exit (hollow)</span>');
  });

  it('warns in the header when a pinned image tag names another image now', () => {
    const moved =
      'image my-eval:1 now names sha256:bbbbbbbbbbbb: this batch keeps running sha256:aaaaaaaaaaaa, the image it had at start';
    expect(renderReportHtml(model({ imagesMoved: [moved] }))).toContain(
      `<div class="pausebox" id="images-moved"><span class="now">warning: ${moved}</span></div>`,
    );
    expect(renderReportHtml(model())).not.toContain('images-moved');
  });
});
