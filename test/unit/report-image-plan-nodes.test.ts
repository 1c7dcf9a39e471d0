import { describe, expect, it } from 'vitest';
import { renderReportHtml } from '../../src/core/report/html.js';
import { buildReportModel } from '../../src/core/report/model.js';
import type { ReportInput } from '../../src/core/report/types.js';

/** Issue 43, item 6: on a swarm the report says, per node, what was pulled, evicted and held there. */

const T0 = Date.parse('2026-01-01T00:00:00.000Z');
const at = (sec: number): string => new Date(T0 + sec * 1000).toISOString();
const D1 = `sha256:${'1'.repeat(64)}`;
const D2 = `sha256:${'2'.repeat(64)}`;
const MiB = 2 ** 20;
const A = 'reg:5000/a:1';
const B = 'reg:5000/b:1';

function input(extra: Partial<ReportInput>): ReportInput {
  return {
    batchId: 'b1',
    createdAt: at(0),
    capacity: { maxWorkers: 1 },
    gpuUnobservable: false,
    journal: [{ type: 'batch_created', at: at(0) }],
    jobs: [],
    supervisorAlive: false,
    now: at(100),
    ...extra,
  };
}

const images = {
  [A]: { digest: D1, ref: `reg:5000/a@${D1}`, compressed_bytes: null },
  [B]: { digest: D2, ref: `reg:5000/b@${D2}`, compressed_bytes: null },
};
const base = { images, budget_bytes: 64 * MiB, budget_basis: 'capacity.image_disk_bytes', concurrency: 2 };

const rec = (sec: number, action: string, image: string, fields: Record<string, unknown> = {}) => ({
  type: 'image',
  at: at(sec),
  action,
  image,
  ref: images[image as keyof typeof images]?.ref ?? image,
  ...fields,
});

/** Two nodes at work: n1 pulls a and b and evicts a; n2 pulls a, and b's pull there fails for good. */
function swarmJournal(n1: string, n2: string) {
  return [
    { type: 'batch_created', at: at(0) },
    rec(1, 'pull_started', A, { node: n1 }),
    rec(2, 'pulled', A, { node: n1, bytes: 20 * MiB }),
    rec(3, 'pull_started', A, { node: n2 }),
    rec(4, 'pulled', A, { node: n2, bytes: 21 * MiB }),
    rec(5, 'waited', A, { job_id: 'j1', waited_ms: 1000, nodes: [n1, n2] }),
    rec(6, 'evicted', A, { node: n1, bytes: 20 * MiB }),
    rec(7, 'pulled', B, { node: n1, bytes: 30 * MiB }),
    rec(8, 'pull_retry', B, { node: n2, attempt: 1, message: 'm' }),
    rec(9, 'pull_failed', B, { node: n2, kind: 'failed', message: 'manifest unknown' }),
    rec(10, 'waited', B, { job_id: 'j2', waited_ms: 500, nodes: [n1] }),
  ];
}

describe('the report shows the image plan per node on a swarm (issue 43)', () => {
  it('per node: pulled, evicted, held at the end, failed, pulls, evictions, retries, waits; per image: its nodes', () => {
    const plan = { ...base, nodes: ['n1', 'n2', 'n3'] };
    const m = buildReportModel(input({ imagePlan: plan, journal: swarmJournal('n1', 'n2') }));
    expect(m.image_plan?.nodes).toEqual([
      {
        node: 'n1',
        pulled: [A, B],
        evicted: [A],
        held: [B],
        held_bytes: 30 * MiB,
        failed: [],
        pulls: 2,
        evictions: 1,
        retries: 0,
        waits: 2,
        waited_ms: 1500,
      },
      {
        node: 'n2',
        pulled: [A],
        evicted: [],
        held: [A],
        held_bytes: 21 * MiB,
        failed: [B],
        pulls: 1,
        evictions: 0,
        retries: 1,
        waits: 1,
        waited_ms: 1000,
      },
      {
        node: 'n3',
        pulled: [],
        evicted: [],
        held: [],
        held_bytes: 0,
        failed: [],
        pulls: 0,
        evictions: 0,
        retries: 0,
        waits: 0,
        waited_ms: 0,
      },
    ]);
    expect(m.image_plan?.images.map((i) => [i.image, i.pulled_on])).toEqual([
      [A, ['n1', 'n2']],
      [B, ['n1']],
    ]);
    // The per-image figures stay the sums over the nodes.
    expect(m.image_plan?.images.map((i) => [i.pulls, i.evictions, i.retries, i.waits, i.waited_ms])).toEqual([
      [2, 1, 0, 1, 1000],
      [1, 0, 1, 1, 500],
    ]);
  });

  it('a pull that succeeds on a node after failing there clears its failure; a node only the journal names is shown', () => {
    const journal = [
      ...swarmJournal('n1', 'n2'),
      rec(11, 'pulled', B, { node: 'n2', bytes: 31 * MiB }),
      rec(12, 'pulled', A, { node: 'n9', bytes: 1 * MiB }),
    ];
    const m = buildReportModel(input({ imagePlan: { ...base, nodes: ['n1', 'n2'] }, journal }));
    const n2 = m.image_plan?.nodes?.find((n) => n.node === 'n2');
    expect(n2?.failed).toEqual([]);
    expect(n2?.held).toEqual([A, B]);
    expect(n2?.held_bytes).toBe(52 * MiB);
    expect(m.image_plan?.nodes?.map((n) => n.node)).toEqual(['n1', 'n2', 'n9']);
  });

  it('report.html has one row per node under the images table', () => {
    const plan = { ...base, nodes: ['n1', 'n2'] };
    const html = renderReportHtml(
      buildReportModel(input({ imagePlan: plan, journal: swarmJournal('n1', 'n2') })),
    );
    const table = /<table id="image-nodes">[\s\S]*?<\/table>/.exec(html)?.[0] ?? '';
    expect(html.indexOf('<table id="image-nodes">')).toBeGreaterThan(html.indexOf('<table id="images">'));
    const n1 = /<tr data-node="n1">(.*?)<\/tr>/.exec(table)?.[1] ?? '';
    const n2 = /<tr data-node="n2">(.*?)<\/tr>/.exec(table)?.[1] ?? '';
    expect([...n1.matchAll(/<td>(\d+)<\/td>/g)].map((x) => x[1])).toEqual(['2', '1', '0', '2']);
    expect(n1).toContain('30.0 MiB');
    expect(n1).toContain(`<td class="held"><code>${B}</code></td>`);
    expect(n2).toContain(`<td class="held"><code>${A}</code></td>`);
    expect(n2).toContain(`<td class="failed"><code>${B}</code></td>`);
    const rowA = /<tr data-image="reg:5000\/a:1">(.*?)<\/tr>/.exec(html)?.[1] ?? '';
    expect(rowA).toContain('<td class="on"><code>n1</code> <code>n2</code></td>');
  });

  it('escapes a hostile node name everywhere it appears', () => {
    const evil = 'n<script>alert(1)</script>"x';
    const plan = { ...base, nodes: [evil, 'n2'] };
    const m = buildReportModel(input({ imagePlan: plan, journal: swarmJournal(evil, 'n2') }));
    expect(m.image_plan?.nodes?.[0]?.node).toBe(evil);
    const html = renderReportHtml(m);
    expect(html).not.toContain('<script>alert(1)');
    expect(html).toContain('data-node="n&lt;script&gt;alert(1)&lt;/script&gt;&quot;x"');
    expect(html).toContain('<code>n&lt;script&gt;alert(1)&lt;/script&gt;&quot;x</code>');
  });

  it('a local batch (no nodes anywhere) keeps exactly its model and page: no per-node fields, no table', () => {
    const journal = [
      { type: 'batch_created', at: at(0) },
      rec(1, 'pulled', A, { bytes: 20 * MiB }),
      rec(2, 'waited', A, { job_id: 'j1', waited_ms: 5 }),
    ];
    const m = buildReportModel(input({ imagePlan: base, journal }));
    expect(Object.keys(m.image_plan ?? {})).toEqual([
      'budget_bytes',
      'budget_basis',
      'concurrency',
      'prune_own_images',
      'images',
      'pair_waits',
    ]);
    for (const i of m.image_plan?.images ?? []) expect(Object.keys(i)).not.toContain('pulled_on');
    const html = renderReportHtml(m);
    expect(html).not.toContain('image-nodes');
    expect(html).not.toContain('class="on"');
  });
});
