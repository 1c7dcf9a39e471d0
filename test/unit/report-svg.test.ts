import { describe, expect, it } from 'vitest';
import type { ReportModel, ReportPair } from '../../src/core/report/types.js';
import { gpuSvg, timelineSvg } from '../../src/core/report/svg.js';

const T0 = Date.parse('2026-12-01T00:00:00.000Z');
const at = (sec: number): string => new Date(T0 + sec * 1000).toISOString();

function pair(i: number, overrides: Partial<ReportPair> = {}): ReportPair {
  return {
    job_id: `p${i}`,
    status: 'finished',
    classification: 'completed',
    reasons: [],
    started_at: at(i * 10),
    finished_at: at(i * 10 + 8),
    duration_sec: 8,
    deadline: null,
    exit_code: 0,
    timed_out: false,
    provider_failure_kind: null,
    provider_http_status: null,
    provider_failure_error_kind: null,
    cleanup_verified: true,
    gpu_peak_mib: 1000 + i,
    slot: i % 2,
    links: {},
    outcome_problems: [],
    why: [],
    ...overrides,
  };
}

function model(pairs: ReportPair[], overrides: Partial<ReportModel> = {}): ReportModel {
  return {
    schema: 'roboguide.e1.report/v1',
    batch_id: 'b',
    state: 'running',
    generated_at: at(1000),
    created_at: at(0),
    supervisor_alive: true,
    pause_reasons: [],
    images_moved: [],
    image_plan: null,
    pause_history: [],
    counts: {
      total: pairs.length,
      pending: 0,
      claimed: 0,
      running: 0,
      completed: pairs.length,
      infrastructure_failure: 0,
      fatal: 0,
      provider_stop: 0,
      harness_failure: 0,
    },
    elapsed_sec: 1000,
    eta: null,
    workers_allowed: 2,
    timeline: {
      start: at(0),
      end: at(1000),
      slots: 2,
      pauses: [
        { from: at(100), to: at(200), reasons: ['fatal'], job_id: 'p3' },
        { from: at(900), to: null, reasons: ['stop_requested'], job_id: null },
      ],
      markers: [
        {
          at: at(1),
          kind: 'source_check',
          ok: false,
          label: 'source check (before_first_dispatch): MISMATCH',
        },
        { at: at(2), kind: 'supervisor_started', label: 'supervisor start' },
        { at: at(20), kind: 'second_worker', label: 'second worker admitted (p2)' },
        { at: at(900), kind: 'stop_requested', label: 'stop --terminate' },
      ],
      second_worker_at: at(20),
    },
    gpu: {
      max_workers: 2,
      rule: { total_mib: 81559, baseline_mib: 1200, fraction: 0.9, two_worker_peak_limit_mib: 30000 },
      largest_peak_mib: 1000,
      note: '',
    },
    pairs,
    ...overrides,
  };
}

describe('timelineSvg', () => {
  it('draws a lane per slot, both pauses (one still open), every marker kind and the pairs with labels', () => {
    const svg = timelineSvg(
      model([
        pair(1),
        pair(2, { finished_at: null, status: 'running', classification: null }),
        pair(3, { slot: null }),
      ]),
    );
    expect(svg.match(/class="lane"/g)).toHaveLength(2);
    expect(svg).toContain('paused 2026-12-01');
    expect(svg).toContain('still paused');
    expect(svg).toContain('class="mk mk-source bad"');
    expect(svg).toContain('class="mk mk-second-worker"');
    expect(svg).toContain('class="mk mk-stop-requested"');
    expect(svg).toContain('class="mk mk-supervisor-started"');
    expect(svg).toContain('data-job="p1"');
    expect(svg).toContain('class="pair k-running" data-job="p2"');
    expect(svg).not.toContain('data-job="p3"'); // never claimed: no slot, no bar
    expect(svg).toMatch(/<text class="lbl" x="[\d.]+" y="\d+" text-anchor="middle">\+\d+m<\/text>/);
  });

  it('past 2,000 pairs the bars have no tooltip and no label', () => {
    const pairs = Array.from({ length: 2_001 }, (_, i) => pair(i));
    const svg = timelineSvg(model(pairs));
    expect(svg).not.toContain('<title>p0:');
    expect(svg).not.toContain('class="plbl"');
    expect(svg.match(/class="pair /g)).toHaveLength(2_001);
  });
});

describe('gpuSvg', () => {
  it('nothing measured: no chart', () => {
    expect(gpuSvg(model([pair(1, { gpu_peak_mib: null })]))).toBe('');
  });

  it('up to 40 pairs: a labelled bar each, coloured by the two-worker limit, with the limit and budget lines', () => {
    const svg = gpuSvg(model([pair(1), pair(2, { gpu_peak_mib: 40_000 })]));
    expect(svg).toContain('class="gbar fits" data-job="p1"');
    expect(svg).toContain('class="gbar over" data-job="p2"');
    expect(svg).toContain('two workers while the largest peak ≤ 30000 MiB');
    expect(svg).toMatch(/budget 0\.9 × 81559 − 1200 = [\d.]+ MiB/);
    expect(svg).toContain('text-anchor="middle">p1</text>');
  });

  it('over 500 pairs: one path per colour instead of a bar each; without a rule no lines and every bar fits', () => {
    const pairs = Array.from({ length: 501 }, (_, i) => pair(i));
    const svg = gpuSvg(
      model(pairs, { gpu: { max_workers: 1, rule: null, largest_peak_mib: 1500, note: '' } }),
    );
    expect(svg).not.toContain('class="gbar');
    expect(svg).toContain('class="gpath fits"');
    expect(svg).not.toContain('class="gpath over"');
    expect(svg).not.toContain('class="limit"');
    expect(svg).not.toContain('class="budget"');
  });
});
