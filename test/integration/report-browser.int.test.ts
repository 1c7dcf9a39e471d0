import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import { supervise } from '../../src/app/batch/supervisor.js';
import { systemClock } from '../../src/adapters/system-clock.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import { createExecutePairDeps } from '../../src/composition-root.js';
import { BIN_RUN_JS } from '../../src/package-root.js';
import { KIND_COLOURS } from '../../src/core/report/html.js';
import type { ReportModel } from '../../src/core/report/types.js';
import { browserSkipReason, openPage } from '../support/browser.js';
import { containersLabelled, DRIVER_IMAGE, noDocker, runtime } from '../support/docker.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';

/**
 * report.html of a finished mixed batch (real engine, two workers under the GPU rule), loaded in a real headless
 * Chromium: every pair is on the page, the timeline bars have their classification's colour, and every evidence
 * link resolves to a file that exists — also in a copy of the folder and from a page written elsewhere (--out).
 */
const skipBrowser = browserSkipReason();
if (skipBrowser !== null && process.env['REQUIRE_BROWSER'] === '1')
  throw new Error(`REQUIRE_BROWSER=1 but ${skipBrowser}`);
if (skipBrowser !== null) console.warn(`report browser tests skipped: ${skipBrowser}`);

const SECRET = `rg-report-secret-${'5f3a9c'.repeat(4)}`;
const rt = runtime();
let work: string;
let output: string;
let batchId: string;

interface PageFacts {
  rows: string[];
  rowKinds: Record<string, string>;
  bars: { job: string; kind: string; fill: string }[];
  links: string[];
  state: string;
  markers: string[];
}

const FACTS = `(() => ({
  rows: [...document.querySelectorAll('#pairs tbody tr')].map((r) => r.dataset.job),
  rowKinds: Object.fromEntries([...document.querySelectorAll('#pairs tbody tr')].map((r) => [r.dataset.job, r.className])),
  bars: [...document.querySelectorAll('#timeline rect.pair')].map((r) => ({ job: r.dataset.job, kind: [...r.classList].find((c) => c.startsWith('k-')).slice(2), fill: getComputedStyle(r).fill })),
  links: [...document.querySelectorAll('#pairs a')].map((a) => a.href),
  state: document.getElementById('state').textContent,
  markers: [...document.querySelectorAll('#timeline g.mk')].map((g) => g.dataset.kind),
}))()`;

function rgb(hex: string): string {
  const n = parseInt(hex.slice(1), 16);
  return `rgb(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255})`;
}

async function factsOf(file: string): Promise<{ facts: PageFacts; png: Buffer }> {
  const page = await openPage(pathToFileURL(file).href);
  try {
    return { facts: await page.evaluate<PageFacts>(FACTS), png: await page.screenshot() };
  } finally {
    await page.close();
  }
}

describe.skipIf(noDocker || skipBrowser !== null)('report.html in a real browser', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-report-'));
    const job = (id: string, actions: string[]) => ({
      job_id: id,
      argv: ['/opt/driver/run', ...actions],
      cwd: join(work, 'cwd'),
      outcome_path: join(work, 'out', `${id}.json`),
      environment: { RG_SECRET: '${RG_SECRET}' },
      timeout_seconds: 60,
    });
    const manifest = {
      schema: 'roboguide.e1.batch/v0.1',
      image: DRIVER_IMAGE,
      jobs: [
        job('r1', ['echo_env=RG_SECRET', 'usage=30000', 'outcome=completed']),
        job('r2', ['stderr_bytes=640', 'outcome=infra']),
        job('r3', ['sleep=1', 'outcome=completed']),
        job('r4', ['session=429', 'outcome=provider_status=429']),
        job('r5', ['outcome=completed']),
      ],
      capacity: { max_workers: 2, gpu_total_mib: 81920, gpu_baseline_mib: 1024, gpu_fraction: 0.9 },
      stop_budget_seconds: 5,
    };
    await mkdir(join(work, 'cwd'));
    await writeFile(join(work, 'm.json'), JSON.stringify(manifest));
    output = join(work, 'batch');
    const environment = { RG_SECRET: SECRET };
    const registryPath = join(work, 'registry.db');
    const record = await prepareBatch(
      { fs: new NodeFileSystem(), host: procHostIdentity, runtime: rt, clock: systemClock },
      {
        manifestPath: join(work, 'm.json'),
        output,
        registryPath,
        bindAddress: '127.0.0.1',
        environment,
        codeVersion: 'test',
      },
    );
    batchId = record.batch_id;
    const registry = SqliteCapacityRegistry.open({ path: registryPath });
    try {
      const store = new EvidenceStore(new NodeFileSystem(), output);
      await supervise(
        {
          store,
          registry,
          execute: createExecutePairDeps(rt, silentLogger),
          logger: silentLogger,
          environment,
          handleSignals: false,
        },
        'start',
      );
    } finally {
      registry.closeSync();
    }
  });
  afterAll(async () => {
    expect(await containersLabelled({ 'roboguide.batch': batchId })).toEqual([]);
    await rm(work, { recursive: true, force: true });
  });

  it('the supervisor left a final report.html: every pair, classification colours, links to files that exist', async () => {
    const file = join(output, 'report.html');
    const html = await readFile(file, 'utf8');
    expect(html).not.toContain(SECRET);
    expect(html).not.toContain(Buffer.from(SECRET).toString('base64').slice(0, 24));
    const { facts, png } = await factsOf(file);
    expect(png.subarray(1, 4).toString()).toBe('PNG');
    expect(png.length).toBeGreaterThan(20_000);
    await writeFile(join(work, 'report.png'), png);
    expect(facts.rows).toEqual(['r1', 'r2', 'r3', 'r4', 'r5']);
    expect(facts.state).not.toBe('RUNNING');
    // r1 and r2 always run; r1 is completed, r2 an infrastructure failure.
    expect(facts.rowKinds).toMatchObject({ r1: 'k-completed', r2: 'k-infrastructure_failure' });
    expect(facts.bars.length).toBeGreaterThanOrEqual(2);
    for (const bar of facts.bars) {
      expect(bar.fill, `${bar.job} (${bar.kind})`).toBe(rgb(KIND_COLOURS[bar.kind]!));
      expect(`k-${bar.kind}`).toBe(facts.rowKinds[bar.job]);
    }
    expect(facts.links.length).toBeGreaterThanOrEqual(facts.bars.length * 3);
    for (const href of facts.links) {
      expect(href.startsWith('file://'), href).toBe(true);
      expect(existsSync(fileURLToPath(href)), href).toBe(true);
    }
    expect(facts.markers).toEqual(expect.arrayContaining(['supervisor_started', 'supervisor_exited']));
  });

  it('`e1-batch report --json` gives the same data; the page written elsewhere (--out) and a copied folder keep working links', async () => {
    const elsewhere = join(work, 'elsewhere');
    await mkdir(elsewhere, { recursive: true }); // a second attempt (CI retries a failed test once) finds it there
    const { stdout } = await promisify(execFile)(process.execPath, [
      BIN_RUN_JS,
      'e1-batch',
      'report',
      '--output',
      output,
      '--out',
      join(elsewhere, 'r.html'),
      '--json',
    ]);
    const model = JSON.parse(stdout) as ReportModel;
    expect(model.batch_id).toBe(batchId);
    expect(model.pairs.map((p) => p.job_id)).toEqual(['r1', 'r2', 'r3', 'r4', 'r5']);
    expect(model.pairs[0]).toMatchObject({
      classification: 'completed',
      gpu_peak_mib: 30000,
      cleanup_verified: true,
      links: { result: 'jobs/r1/result.json' },
    });
    expect(stdout).not.toContain(SECRET);

    const fromElsewhere = await factsOf(join(elsewhere, 'r.html'));
    expect(fromElsewhere.facts.links.length).toBeGreaterThan(0);
    for (const href of fromElsewhere.facts.links) expect(existsSync(fileURLToPath(href)), href).toBe(true);

    const copy = join(work, 'copied-batch');
    await cp(output, copy, { recursive: true });
    const copied = await factsOf(join(copy, 'report.html'));
    expect(copied.facts.links.length).toBeGreaterThan(0);
    for (const href of copied.facts.links) {
      expect(fileURLToPath(href).startsWith(copy), href).toBe(true);
      expect(existsSync(fileURLToPath(href)), href).toBe(true);
    }
  });
});
