import { describe, expect, it } from 'vitest';
import type { BatchStatus } from '../../../src/app/batch/status-shapes.js';
import { statusFromLedger } from '../../../src/app/batch/status.js';
import { renderStatus } from '../../../src/cli/status-view.js';
import { BatchLedger } from '../../../src/core/batch-ledger.js';
import { EGRESS_PAIRS_SHOWN } from '../../../src/core/egress/egress-tally.js';
import { finishFactsOf, type FinishFacts } from '../../../src/core/ledger-facts.js';
import { renderReportHtml } from '../../../src/core/report/html.js';
import { buildReportModel } from '../../../src/core/report/model.js';
import { RESULT_SCHEMA, type ResultRecord } from '../../../src/core/result.js';

const at = (sec: number) => new Date(Date.parse('2026-01-01T00:00:00.000Z') + sec * 1000).toISOString();
const receipt = (sec: number) => ({ claim_id: `c${sec}`, claimed_at: at(sec), container_id: null });
const facts = (sec: number, egress?: FinishFacts['egress']): FinishFacts => ({
  classification: 'completed',
  started_at: at(sec),
  finished_at: at(sec + 5),
  gpu_peak_mib: null,
  ...(egress !== undefined ? { egress } : {}),
});

async function statusOf(ledger: BatchLedger): Promise<BatchStatus> {
  return statusFromLedger({
    ledger,
    output: '/out',
    batch: { batch_id: 'b1', created_at: at(0) } as never,
    capacity: { maxWorkers: 1 },
    supervisor: null,
    alive: false,
    containers: [],
    now: new Date(at(1000)),
    leftoverWhy: () => Promise.resolve('unknown_job'),
  });
}

describe('refused egress attempts in status (issue 42)', () => {
  it('counts per pair and for the batch, lists the pairs refused something with their hosts, survives the basis', async () => {
    const jobs = Array.from({ length: 14 }, (_, i) => ({ job_id: `p${i}`, timeout_seconds: 60 }));
    const ledger = BatchLedger.forJobs(jobs);
    ledger.settle('p0', receipt(0), facts(0));
    ledger.settle('p1', receipt(1), facts(1, { allowed: 3, refused: 0, refused_hosts: [] }));
    for (let i = 2; i < 14; i++)
      ledger.settle(
        `p${i}`,
        receipt(i),
        facts(i, { allowed: 1, refused: i, refused_hosts: [`evil${i}.test:443`, '198.18.1.11:80'] }),
      );
    const status = await statusOf(ledger);
    const refusedTotal = Array.from({ length: 12 }, (_, i) => i + 2).reduce((a, b) => a + b, 0);
    expect(status.egress).toMatchObject({ pairs: 13, allowed: 15, refused: refusedTotal, more: 2 });
    expect(status.egress?.refused_pairs.length).toBe(EGRESS_PAIRS_SHOWN);
    expect(status.egress?.refused_pairs[0]).toMatchObject({
      job_id: 'p13',
      allowed: 1,
      refused: 13,
      refused_hosts: ['evil13.test:443', '198.18.1.11:80'],
    });
    const text = renderStatus(status, new Date(at(1000)));
    expect(text).toContain(`egress: ${refusedTotal} refused attempts, 15 allowed, over 13 allowlisted pairs`);
    expect(text).toContain('  egress p13  refused 13  allowed 1  (evil13.test:443, 198.18.1.11:80)');
    expect(text).toContain('… and 2 more pairs with refused attempts');
    // Hot status: a ledger restored from status.json's basis says the same.
    const restored = BatchLedger.restore(JSON.parse(JSON.stringify(ledger.basis())), (id) =>
      jobs.findIndex((j) => j.job_id === id),
    );
    expect((await statusOf(restored)).egress).toEqual(status.egress);
    // A result replaced by its files: its counts are taken out first.
    ledger.settle('p13', receipt(13), facts(13, { allowed: 0, refused: 1, refused_hosts: ['x.test:80'] }));
    expect((await statusOf(ledger)).egress).toMatchObject({ refused: refusedTotal - 12, allowed: 14 });
  });

  it('has no egress line for a batch without allowlisted pairs; reads the counts from pair_finished', async () => {
    const ledger = BatchLedger.forJobs([{ job_id: 'a', timeout_seconds: 60 }]);
    ledger.settle('a', receipt(0), facts(0));
    const status = await statusOf(ledger);
    expect(status.egress).toBeUndefined();
    expect(renderStatus(status, new Date(at(1000)))).not.toContain('egress');
    const read = finishFactsOf({
      type: 'pair_finished',
      job_id: 'a',
      classification: 'completed',
      started_at: at(0),
      finished_at: at(1),
      gpu_peak_mib: null,
      egress: { allowed: 2, refused: 1, refused_hosts: ['other.test:80'] },
    });
    expect(read?.egress).toEqual({ allowed: 2, refused: 1, refused_hosts: ['other.test:80'] });
  });

  it('the report shows each allowlisted pair allowed / refused and the hosts refused, escaped', () => {
    const result: ResultRecord = {
      schema: RESULT_SCHEMA,
      job_id: 'p0',
      batch_id: 'b1',
      claim_id: 'c0',
      classification: 'completed',
      reasons: [],
      outcome: { job_id: 'p0', infrastructure_failure: false, fatal_failure: false, arms: {} },
      outcome_redactions: 0,
      outcome_sha256: null,
      container: { id: 'c', exit_code: 0, timed_out: false, oom_killed: false },
      logs: { stdout: { bytes: 1, closed: true }, stderr: { bytes: 1, closed: true } },
      sessions: { files: 0, bytes: 0, refusals: [] },
      provider_failure: null,
      provider_failure_error_kind: null,
      cleanup: { removed: true, verified_absent: true, attempts: 1 },
      engine_error: null,
      started_at: at(0),
      finished_at: at(5),
      egress: {
        mode: 'allowlist',
        allowed: 2,
        refused: 3,
        hosts: ['allowed.test:443'],
        refused_hosts: ['<evil>.test:80', '[REDACTED].test:443'],
      },
    };
    const model = buildReportModel({
      batchId: 'b1',
      createdAt: at(0),
      capacity: { maxWorkers: 1 },
      gpuUnobservable: false,
      journal: [],
      jobs: [
        {
          job_id: 'p0',
          timeout_seconds: 60,
          receipt: { claimed_at: at(0), container_id: 'c' },
          result,
          files: ['result.json'],
        },
      ],
      supervisorAlive: false,
      now: at(100),
    });
    expect(model.pairs[0]?.egress).toEqual({
      allowed: 2,
      refused: 3,
      refused_hosts: ['<evil>.test:80', '[REDACTED].test:443'],
    });
    const html = renderReportHtml(model);
    expect(html).toContain('<th data-sort="num">egress</th>');
    expect(html).toContain('allowed 2 / refused 3');
    expect(html).toContain('<li>&lt;evil&gt;.test:80</li>');
    expect(html).not.toContain('<evil>');
  });
});
