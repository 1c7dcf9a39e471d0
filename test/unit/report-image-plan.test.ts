import { describe, expect, it } from 'vitest';
import { renderReportHtml } from '../../src/core/report/html.js';
import { buildReportModel } from '../../src/core/report/model.js';
import type { ReportInput } from '../../src/core/report/types.js';

const T0 = Date.parse('2026-01-01T00:00:00.000Z');
const at = (sec: number): string => new Date(T0 + sec * 1000).toISOString();
const D1 = `sha256:${'1'.repeat(64)}`;
const D2 = `sha256:${'2'.repeat(64)}`;

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

const plan = {
  images: {
    'reg:5000/a:1': { digest: D1, ref: `reg:5000/a@${D1}`, compressed_bytes: 10 * 2 ** 20 },
    'reg:5000/b:1': { digest: D2, ref: `reg:5000/b@${D2}`, compressed_bytes: null },
  },
  budget_bytes: 64 * 2 ** 20,
  budget_basis: 'capacity.image_disk_bytes',
  concurrency: 2,
};

const journal = [
  { type: 'batch_created', at: at(0) },
  {
    type: 'image',
    at: at(1),
    action: 'pull_started',
    image: 'reg:5000/a:1',
    ref: plan.images['reg:5000/a:1'].ref,
  },
  { type: 'image', at: at(2), action: 'pulled', image: 'reg:5000/a:1', ref: 'x', bytes: 21 * 2 ** 20 },
  {
    type: 'image',
    at: at(3),
    action: 'waited',
    image: 'reg:5000/a:1',
    ref: 'x',
    job_id: 'j1',
    waited_ms: 1500,
  },
  { type: 'image', at: at(4), action: 'evicted', image: 'reg:5000/a:1', ref: 'x', bytes: 21 * 2 ** 20 },
  { type: 'image', at: at(5), action: 'pulled', image: 'reg:5000/a:1', ref: 'x', bytes: 22 * 2 ** 20 },
  {
    type: 'image',
    at: at(6),
    action: 'pull_retry',
    image: 'reg:5000/b:1',
    ref: 'y',
    attempt: 1,
    message: 'm',
  },
  {
    type: 'image',
    at: at(7),
    action: 'pull_failed',
    image: 'reg:5000/b:1',
    ref: 'y',
    kind: 'failed',
    message: 'manifest unknown <b>',
  },
  {
    type: 'image',
    at: at(8),
    action: 'waited',
    image: 'reg:5000/b:1',
    ref: 'y',
    job_id: 'j2',
    waited_ms: 250,
  },
  {
    type: 'image',
    at: at(9),
    action: 'waited',
    image: 'reg:5000/a:1',
    ref: 'x',
    job_id: 'j1',
    waited_ms: 500,
  },
];

describe('the report shows the image plan (issue 43)', () => {
  it('per image: digest, sizes, pulls, evictions, retries, failure, waits; per pair: its wait', () => {
    const m = buildReportModel(input({ imagePlan: plan, journal }));
    expect(m.image_plan).toEqual({
      budget_bytes: 64 * 2 ** 20,
      budget_basis: 'capacity.image_disk_bytes',
      concurrency: 2,
      prune_own_images: false,
      images: [
        {
          image: 'reg:5000/a:1',
          digest: D1,
          ref: `reg:5000/a@${D1}`,
          compressed_bytes: 10 * 2 ** 20,
          store_bytes: 22 * 2 ** 20,
          pulls: 2,
          evictions: 1,
          retries: 0,
          failure: null,
          waits: 2,
          waited_ms: 2000,
        },
        {
          image: 'reg:5000/b:1',
          digest: D2,
          ref: `reg:5000/b@${D2}`,
          compressed_bytes: null,
          store_bytes: null,
          pulls: 0,
          evictions: 0,
          retries: 1,
          failure: { kind: 'failed', message: 'manifest unknown <b>' },
          waits: 1,
          waited_ms: 250,
        },
      ],
      pair_waits: { j1: 2000, j2: 250 },
    });
  });

  it('report.html has the images table (escaped) and the pairs that waited', () => {
    const html = renderReportHtml(buildReportModel(input({ imagePlan: plan, journal })));
    const table = /<table id="images">[\s\S]*?<\/table>/.exec(html)?.[0] ?? '';
    const rowA = /<tr data-image="reg:5000\/a:1">(.*?)<\/tr>/.exec(table)?.[1] ?? '';
    expect(rowA).toContain(D1);
    expect(rowA).toContain('10.0 MiB');
    expect(rowA).toContain('22.0 MiB');
    expect([...rowA.matchAll(/<td>(\d+)<\/td>/g)].map((x) => x[1])).toEqual(['2', '1', '0', '2']);
    expect(table).toContain('failed: manifest unknown &lt;b&gt;');
    expect(table).not.toContain('<b>');
    expect(html).toMatch(
      /<li data-job="j1"><code>j1<\/code> 2\.0 s<\/li><li data-job="j2"><code>j2<\/code> 0\.3 s<\/li>/,
    );
    expect(html).toContain('budget 64.0 MiB (capacity.image_disk_bytes), 2 pull(s) at once');
  });

  it('no plan: no section, image_plan null', () => {
    const m = buildReportModel(input({}));
    expect(m.image_plan).toBeNull();
    expect(renderReportHtml(m)).not.toContain('id="image-plan"');
  });
});
