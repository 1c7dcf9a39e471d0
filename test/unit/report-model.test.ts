import { describe, expect, it } from 'vitest';
import { estimateEta } from '../../src/core/report/eta.js';
import { buildReportModel } from '../../src/core/report/model.js';
import type { ReportInput, ReportJob } from '../../src/core/report/types.js';
import { assignSlots } from '../../src/core/report/slots.js';
import { RESULT_SCHEMA, type Classification, type ResultRecord } from '../../src/core/result.js';

const T0 = Date.parse('2026-01-01T00:00:00.000Z');
const at = (sec: number): string => new Date(T0 + sec * 1000).toISOString();

function result(
  jobId: string,
  classification: Classification,
  from: number,
  to: number,
  extra: Partial<ResultRecord> = {},
): ResultRecord {
  return {
    schema: RESULT_SCHEMA,
    job_id: jobId,
    batch_id: 'b1',
    claim_id: `claim-${jobId}`,
    classification,
    reasons: classification === 'completed' ? [] : ['infrastructure_failure_flag'],
    outcome: { job_id: jobId, infrastructure_failure: false, fatal_failure: false, arms: [] },
    outcome_redactions: 0,
    outcome_sha256: null,
    container: { id: `c-${jobId}`, exit_code: 0, timed_out: false, oom_killed: false },
    logs: { stdout: { bytes: 1, closed: true }, stderr: { bytes: 1, closed: true } },
    sessions: { files: 0, bytes: 0, refusals: [] },
    provider_failure: null,
    provider_failure_error_kind: null,
    cleanup: { removed: true, verified_absent: true, attempts: 1 },
    engine_error: null,
    started_at: at(from),
    finished_at: at(to),
    ...extra,
  };
}

const ALL_FILES = ['receipt.json', 'result.json', 'stderr.log', 'stdout.log'];

function job(id: string, r: ResultRecord | null, claimedAt: number | null, files = ALL_FILES): ReportJob {
  return {
    job_id: id,
    timeout_seconds: 100,
    receipt: claimedAt === null ? null : { claimed_at: at(claimedAt), container_id: `c-${id}` },
    result: r,
    files,
  };
}

function input(jobs: ReportJob[], extra: Partial<ReportInput> = {}): ReportInput {
  return {
    batchId: 'b1',
    createdAt: at(0),
    capacity: { maxWorkers: 2, gpuTotalMib: 80_000, gpuBaselineMib: 1_000, gpuFraction: 0.9 },
    gpuUnobservable: false,
    journal: [
      { type: 'batch_created', at: at(0) },
      { type: 'supervisor_started', at: at(1), mode: 'start' },
      { type: 'source_check', at: at(1), phase: 'before_first_dispatch', ok: true },
    ],
    jobs,
    supervisorAlive: false,
    now: at(1000),
    ...extra,
  };
}

const withPeak = (mib: number): Partial<ResultRecord> => ({
  outcome: {
    job_id: 'x',
    infrastructure_failure: false,
    fatal_failure: false,
    arms: [],
    resource_usage: { both_arms_measured: true, peak_job_gpu_mib: mib },
  },
});

describe('report model', () => {
  it('lists every pair in manifest order with its classification, duration, evidence links and exit code', () => {
    const m = buildReportModel(
      input([
        job('p1', result('p1', 'completed', 2, 12), 2),
        job(
          'p2',
          result('p2', 'infrastructure_failure', 12, 15, {
            container: { id: 'c', exit_code: 3, timed_out: true, oom_killed: false },
          }),
          12,
        ),
        job('p3', null, null, []),
      ]),
    );
    expect(m.pairs.map((p) => [p.job_id, p.status, p.classification, p.duration_sec, p.exit_code])).toEqual([
      ['p1', 'finished', 'completed', 10, 0],
      ['p2', 'finished', 'infrastructure_failure', 3, 3],
      ['p3', 'pending', null, null, null],
    ]);
    expect(m.pairs[0]!.links).toEqual({
      stdout: 'jobs/p1/stdout.log',
      stderr: 'jobs/p1/stderr.log',
      result: 'jobs/p1/result.json',
    });
    expect(m.pairs[1]!.timed_out).toBe(true);
    expect(m.pairs[2]!.links).toEqual({});
    expect(m.counts).toMatchObject({ total: 3, pending: 1, completed: 1, infrastructure_failure: 1 });
  });

  it('links only files that exist', () => {
    const m = buildReportModel(
      input([job('p1', null, 5, ['receipt.json', 'stdout.log'])], { supervisorAlive: true, now: at(20) }),
    );
    expect(m.pairs[0]!.links).toEqual({ stdout: 'jobs/p1/stdout.log' });
  });

  it('a claim without result is running under a live supervisor and unfinished without one', () => {
    const jobs = [job('p1', result('p1', 'completed', 0, 10), 0), job('p2', null, 10, ['receipt.json'])];
    const live = buildReportModel(input(jobs, { supervisorAlive: true, now: at(30) }));
    expect(live.pairs[1]).toMatchObject({ status: 'running', duration_sec: 20, deadline: at(110) });
    expect(live.state).toBe('running');
    expect(live.counts.running).toBe(1);
    const dead = buildReportModel(input(jobs, { supervisorAlive: false, now: at(30) }));
    expect(dead.pairs[1]!.status).toBe('unfinished');
    expect(dead.state).toBe('paused');
  });

  it('puts overlapping pairs on a second worker slot and marks when the second worker was admitted', () => {
    const m = buildReportModel(
      input([
        job('p1', result('p1', 'completed', 1, 10, withPeak(20_000)), 1),
        job('p2', result('p2', 'completed', 10, 30), 10),
        job('p3', result('p3', 'completed', 11, 25), 11),
        job('p4', result('p4', 'completed', 26, 40), 26),
      ]),
    );
    expect(m.pairs.map((p) => p.slot)).toEqual([0, 0, 1, 1]);
    expect(m.timeline.slots).toBe(2);
    expect(m.timeline.second_worker_at).toBe(at(11));
    expect(m.timeline.markers.map((k) => k.kind)).toEqual([
      'supervisor_started',
      'source_check',
      'second_worker',
    ]);
    expect(m.workers_allowed).toBe(2);
  });

  it('shows pauses as spans from the pause to the resume, and an open span while still paused', () => {
    const m = buildReportModel(
      input([job('p1', result('p1', 'fatal', 1, 5), 1), job('p2', null, null, [])], {
        journal: [
          { type: 'paused', at: at(5), reasons: ['fatal'], job_id: 'p1' },
          { type: 'resumed', at: at(50), cleared: [], kept: ['fatal'] },
          { type: 'paused', at: at(60), reasons: ['harness'] },
        ],
      }),
    );
    expect(m.timeline.pauses).toEqual([
      { from: at(5), to: at(50), reasons: ['fatal'], job_id: 'p1' },
      { from: at(60), to: null, reasons: ['harness'], job_id: null },
    ]);
    expect(m.pause_reasons).toEqual(expect.arrayContaining(['fatal', 'harness']));
    expect(m.pause_history.map((h) => h.event)).toEqual(['paused', 'resumed', 'paused']);
  });

  it('GPU: per-pair peaks from completed pairs only, against the budget rule', () => {
    const m = buildReportModel(
      input([
        job('p1', result('p1', 'completed', 1, 10, withPeak(40_000)), 1),
        job('p2', result('p2', 'infrastructure_failure', 10, 20, withPeak(50_000)), 10),
      ]),
    );
    expect(m.pairs.map((p) => p.gpu_peak_mib)).toEqual([40_000, null]);
    expect(m.gpu.rule).toEqual({
      total_mib: 80_000,
      baseline_mib: 1_000,
      fraction: 0.9,
      two_worker_peak_limit_mib: 35_500,
    });
    expect(m.gpu.largest_peak_mib).toBe(40_000);
    expect(m.workers_allowed).toBe(1);
    expect(m.gpu.note).toContain('serial');
  });

  it('an unobservable GPU host stays serial whatever the pairs report', () => {
    const m = buildReportModel(
      input([job('p1', result('p1', 'completed', 1, 10, withPeak(10)), 1)], { gpuUnobservable: true }),
    );
    expect(m.workers_allowed).toBe(1);
    expect(m.gpu.note).toMatch(/not observable/);
  });

  it('provider failure, cleanup and a diagnosis error are carried per pair', () => {
    const r = result('p1', 'provider_stop', 1, 2, {
      provider_failure: {
        schema: 'roboguide.provider_failure/v1',
        kind: 'usage_limit_exceeded',
        http_status: 429,
      },
      cleanup: { removed: true, verified_absent: false, attempts: 3 },
    });
    const m = buildReportModel(input([job('p1', r, 1)]));
    expect(m.pairs[0]).toMatchObject({
      provider_failure_kind: 'usage_limit_exceeded',
      provider_http_status: 429,
      cleanup_verified: false,
    });
  });

  it('the timeline of a finished batch ends at its last event, of a live one at now', () => {
    const jobs = [job('p1', result('p1', 'completed', 1, 10), 1)];
    expect(buildReportModel(input(jobs, { now: at(5000) })).timeline.end).toBe(at(10));
    expect(
      buildReportModel(input([...jobs, job('p2', null, null, [])], { now: at(5000), supervisorAlive: true }))
        .timeline.end,
    ).toBe(at(5000));
  });

  it('ETA only while running, from the mean duration of finished pairs', () => {
    const jobs = [
      job('p1', result('p1', 'completed', 0, 10), 0),
      job('p2', result('p2', 'completed', 10, 30), 10),
      job('p3', null, null, []),
      job('p4', null, null, []),
    ];
    const m = buildReportModel(
      input(jobs, { supervisorAlive: true, now: at(30), capacity: { maxWorkers: 1 } }),
    );
    expect(m.eta).toEqual({ remaining_sec: 30, mean_pair_sec: 15, basis_pairs: 2 });
    expect(buildReportModel(input(jobs, { supervisorAlive: false })).eta).toBeNull();
  });
});

describe('estimateEta', () => {
  it('spreads pending work and what running pairs have left over the allowed workers', () => {
    expect(
      estimateEta({
        finishedDurationsSec: [10, 30],
        pending: 4,
        runningElapsedSec: [5, 50],
        workersAllowed: 2,
      }),
    ).toEqual({
      remaining_sec: 48, // (4 × 20 + 15 + 0) / 2 = 47.5
      mean_pair_sec: 20,
      basis_pairs: 2,
    });
  });
  it('gives no estimate without a finished pair or without work left', () => {
    expect(
      estimateEta({ finishedDurationsSec: [], pending: 3, runningElapsedSec: [], workersAllowed: 1 }),
    ).toBeNull();
    expect(
      estimateEta({ finishedDurationsSec: [5], pending: 0, runningElapsedSec: [], workersAllowed: 1 }),
    ).toBeNull();
  });
});

describe('assignSlots', () => {
  it('reuses the lowest free slot and opens one only on overlap', () => {
    const slots = assignSlots([
      { id: 'a', startMs: 0, endMs: 10 },
      { id: 'b', startMs: 5, endMs: 20 },
      { id: 'c', startMs: 10, endMs: 15 },
      { id: 'd', startMs: 12, endMs: 30 },
      { id: 'e', startMs: 21, endMs: 22 },
    ]);
    expect(Object.fromEntries(slots)).toEqual({ a: 0, b: 1, c: 0, d: 2, e: 0 });
  });
});

describe('report model: evidence that explains itself', () => {
  it('shows no source check marker when no file was pinned (nothing compared, nothing matched)', () => {
    const m = buildReportModel(
      input([], {
        journal: [
          {
            type: 'source_check',
            at: at(1),
            phase: 'before_first_dispatch',
            ok: true,
            checked: 0,
            mismatched: [],
          },
          { type: 'source_check', at: at(2), phase: 'at_drain', ok: true, checked: 2, mismatched: [] },
        ],
      }),
    );
    expect(m.timeline.markers.filter((k) => k.kind === 'source_check').map((k) => k.label)).toEqual([
      'source check (at_drain): match',
    ]);
  });

  it("carries the outcome's broken rules per pair, and links the outcome copy only when it was kept", () => {
    const problems = [{ path: 'infrastructure_failure', message: 'must be a boolean' }];
    const kept = result('p1', 'infrastructure_failure', 2, 4, {
      outcome_problems: problems,
      outcome_sha256: 'b'.repeat(64),
    });
    const m = buildReportModel(
      input([
        {
          ...job('p1', kept, 2, [...ALL_FILES, 'outcome']),
          receipt: { claimed_at: at(2), container_id: 'c', private_outcome: 'outcome/out.json' },
        },
        {
          ...job('p2', result('p2', 'infrastructure_failure', 4, 6), 4),
          receipt: { claimed_at: at(4), container_id: 'c', private_outcome: 'outcome/out.json' },
        },
      ]),
    );
    expect(m.pairs[0]!.outcome_problems).toEqual(['infrastructure_failure: must be a boolean']);
    expect(m.pairs[0]!.links.outcome).toBe('jobs/p1/outcome/out.json');
    expect(m.pairs[1]!.outcome_problems).toEqual([]);
    expect(m.pairs[1]!.links.outcome).toBeUndefined();
  });
});
