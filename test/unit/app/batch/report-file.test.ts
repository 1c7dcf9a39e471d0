import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../../../src/adapters/fs/node-file-system.js';
import { reportRefresher } from '../../../../src/app/batch/report.js';
import { REPORT_FILE } from '../../../../src/core/evidence-names.js';
import { reportTarget, writeReportFile, type ReportFileDeps } from '../../../../src/app/batch/report-file.js';
import { EvidenceStore } from '../../../../src/app/evidence/evidence-store.js';
import { InvalidInputError } from '../../../../src/core/errors.js';
import { claimJob, finishJob, startTestBatch, type TestBatch } from '../../../support/batch-dir.js';
import { procHostIdentity } from '../../../../src/adapters/host-identity.js';
import { fakeLogger } from '../../../support/fakes.js';
import { clockAt } from '../../../support/fake-time.js';

let dir: string;
let batch: TestBatch;
const now = new Date('2026-12-02T10:30:00Z');
const deps: ReportFileDeps = {
  fs: new NodeFileSystem(),
  storeAt: (d) => new EvidenceStore(new NodeFileSystem(), d),
  host: procHostIdentity,
};

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-report-file-'));
  batch = await startTestBatch(dir, { jobs: ['a', 'b'] });
  await finishJob(batch, await claimJob(batch, 'a'), {
    classification: 'harness_failure',
    reasons: ['lost_worker'],
  });
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function usage(promise: Promise<unknown>): Promise<InvalidInputError> {
  const err: unknown = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(InvalidInputError);
  return err as InvalidInputError;
}

describe('writeReportFile (`e1-batch report`)', () => {
  it('by default writes <output>/report.html from the evidence and returns its model and path', async () => {
    const { model, path } = await writeReportFile(deps, { output: batch.output, now });
    expect(path).toBe(join(batch.output, REPORT_FILE));
    expect(model.batch_id).toBe(batch.batchId);
    expect(model.pairs.map((p) => [p.job_id, p.classification ?? p.status])).toEqual([
      ['a', 'harness_failure'],
      ['b', 'pending'],
    ]);
    const html = await readFile(path, 'utf8');
    expect(html).toContain(batch.batchId);
    expect(html).toContain('href="jobs/a/result.json"');
  });

  it('--out elsewhere: the page goes there and its evidence links climb back to the batch', async () => {
    await mkdir(join(dir, 'pages'));
    const { path } = await writeReportFile(deps, {
      output: batch.output,
      out: join(dir, 'pages', 'r.html'),
      now,
    });
    expect(path).toBe(join(dir, 'pages', 'r.html'));
    expect(await readFile(path, 'utf8')).toContain('href="../batch/jobs/a/result.json"');
    expect(await batch.store.exists(REPORT_FILE)).toBe(false);
  });

  it('refuses --out whose folder does not exist, or is a file, or that names a folder; nothing written', async () => {
    const missing = await usage(
      writeReportFile(deps, { output: batch.output, out: join(dir, 'nope', 'r.html'), now }),
    );
    expect(missing.issues).toEqual([
      { path: '--out', rule: `its folder ${join(dir, 'nope')} must be an existing directory` },
    ]);
    await writeFile(join(dir, 'plain'), '');
    expect(
      (await usage(writeReportFile(deps, { output: batch.output, out: join(dir, 'plain', 'r.html'), now })))
        .issues[0]?.rule,
    ).toContain('must be an existing directory');
    const folder = await usage(writeReportFile(deps, { output: batch.output, out: join(dir, 'batch'), now }));
    expect(folder.issues).toEqual([
      { path: '--out', rule: `${join(dir, 'batch')} is a directory; name a file` },
    ]);
    expect(await batch.store.exists(REPORT_FILE)).toBe(false);
  });
});

describe('reportTarget: the links from the page back to the batch', () => {
  it('empty in the batch itself; URL-encoded segments otherwise', async () => {
    expect((await reportTarget(deps, batch.output, join(batch.output, 'x.html'))).linkBase).toBe('');
    const odd = join(dir, 'a b#c');
    await mkdir(odd);
    const target = await reportTarget(deps, batch.output, join(odd, 'r.html'));
    expect([target.linkBase, target.rel, target.store.root]).toEqual(['../batch/', 'r.html', odd]);
    const inside = await reportTarget(deps, join(dir, 'a b#c'), join(dir, 'r.html'));
    expect(inside.linkBase).toBe('a%20b%23c/');
  });
});

describe('reportRefresher (the supervisor keeps report.html current)', () => {
  it('flush writes the page; a write that fails is logged and never thrown', async () => {
    const warnings: unknown[] = [];
    const logger = fakeLogger({ warn: (o) => void warnings.push(o) });
    const clock = clockAt(() => now);
    await reportRefresher(batch.store, clock, logger, procHostIdentity).flush();
    expect(await batch.store.exists(REPORT_FILE)).toBe(true);
    expect(warnings).toEqual([]);
    const notABatch = new EvidenceStore(new NodeFileSystem(), join(dir, 'not-a-batch'));
    await reportRefresher(notABatch, clock, logger, procHostIdentity).flush();
    expect(warnings).toHaveLength(1);
  });
});
