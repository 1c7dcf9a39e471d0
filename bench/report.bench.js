// Report generation for a synthetic 10,000-pair batch (aim: <= 1 s and <= 5 MB; issue 16).
// 1. In memory: buildReportModel + renderReportHtml, against a baseline of JSON.stringify of the same evidence
//    (the cost of merely serializing what the report is built from).
// 2. From disk: writeReport on a batch folder with 10,000 job folders (receipt, result, two logs each), against
//    a baseline of reading the same evidence (readJobFiles + readJournal: what every status.json write costs).
// Medians of several runs, ratios of the medians; sizes of report.html and of the --json model.
// Run after the build: npm run build && npx node bench/report.bench.js [pairs] [runs]
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EvidenceStore } from '../dist/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../dist/adapters/fs/node-file-system.js';
import { loadBatch, readJobFiles } from '../dist/app/batch/batch-context.js';
import { writeReport } from '../dist/app/batch/report.js';
import { renderReportHtml } from '../dist/core/report/html.js';
import { buildReportModel } from '../dist/core/report/model.js';
import { elapsedMsSince, median } from './support.js';

const PAIRS = Number(process.argv[2] ?? 10_000);
const RUNS = Number(process.argv[3] ?? 5);
const MEMORY_ONLY = process.argv.includes('--memory-only');
const T0 = Date.parse('2026-12-01T00:00:00.000Z');
const at = (sec) => new Date(T0 + sec * 1000).toISOString();
const KINDS = [
  'completed',
  'completed',
  'completed',
  'completed',
  'completed',
  'completed',
  'infrastructure_failure',
  'provider_stop',
  'harness_failure',
  'fatal',
];

/** A deterministic mixed batch on two workers: durations 60-600 s, a few pauses, GPU peaks on completed pairs. */
function synthetic(pairs) {
  const jobs = [];
  const journal = [
    { seq: 1, type: 'batch_created', at: at(0) },
    { seq: 2, type: 'supervisor_started', at: at(1), mode: 'start', pid: 1 },
    { seq: 3, type: 'source_check', at: at(1), phase: 'before_first_dispatch', ok: true },
  ];
  const free = [2, 2];
  let seed = 42;
  const rand = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  for (let i = 0; i < pairs; i++) {
    const id = `pair-${String(i + 1).padStart(5, '0')}`;
    const w = free[0] <= free[1] ? 0 : 1;
    const start = free[w];
    const end = start + 60 + Math.floor(rand() * 540);
    free[w] = end + 1;
    const kind = KINDS[i % KINDS.length];
    const peak = kind === 'completed' ? 20_000 + Math.floor(rand() * 14_000) : null;
    const result = {
      schema: 'roboguide.e1.result/v1',
      job_id: id,
      batch_id: 'bench',
      claim_id: `claim-${id}`,
      classification: kind,
      reasons:
        kind === 'completed'
          ? []
          : kind === 'provider_stop'
            ? ['provider_requires_stop', 'provider_status_not_allowed']
            : kind === 'fatal'
              ? ['fatal_failure_flag']
              : ['infrastructure_failure_flag'],
      outcome: {
        job_id: id,
        infrastructure_failure: kind === 'infrastructure_failure',
        fatal_failure: kind === 'fatal',
        arms: [{ verdict: 'rejected' }],
        ...(peak ? { resource_usage: { both_arms_measured: true, peak_job_gpu_mib: peak } } : {}),
      },
      outcome_sha256: null,
      container: { id: `c${i}`.padEnd(64, '0'), exit_code: 0, timed_out: false, oom_killed: false },
      logs: { stdout: { bytes: 1000, closed: true }, stderr: { bytes: 10, closed: true } },
      sessions: { files: 1, bytes: 100, refusals: [] },
      provider_failure:
        kind === 'provider_stop'
          ? {
              schema: 'roboguide.provider_failure/v1',
              kind: 'response_too_many_failed_attempts',
              http_status: 429,
            }
          : null,
      provider_failure_error_kind: null,
      cleanup: { removed: true, verified_absent: true, attempts: 1 },
      engine_error: null,
      started_at: at(start),
      finished_at: at(end),
    };
    const receipt = {
      schema: 'roboguide.e1.receipt/v1',
      batch_id: 'bench',
      job_id: id,
      attempt: 1,
      claim_id: `claim-${id}`,
      claimed_at: at(start),
      host_boot_id: null,
      supervisor: { pid: 1, start_ticks: null, boot_id: null },
      reservation_id: 'r',
      image: 'roboguide/pair-driver:1',
      outcome_path: `/tmp/out/${id}.json`,
      source_sha256: {},
      code_version: 'bench',
      container_id: result.container.id,
      container_name: `roboguide-${id}`,
    };
    jobs.push({
      job_id: id,
      timeout_seconds: 36060,
      receipt,
      result,
      files: ['receipt.json', 'result.json', 'stderr.log', 'stdout.log'],
    });
    journal.push(
      { type: 'claimed', at: at(start), job_id: id },
      { type: 'container_created', at: at(start), job_id: id },
      { type: 'pair_finished', at: at(end), job_id: id, classification: kind },
      { type: 'reconciled', at: at(end), job_id: id },
    );
    if (kind === 'fatal' && i % 1000 === 9)
      journal.push(
        { type: 'paused', at: at(end), reasons: ['fatal'], job_id: id },
        { type: 'resumed', at: at(end + 3600), cleared: [], kept: [] },
      );
  }
  journal.push({ type: 'supervisor_exited', at: at(Math.max(...free)), state: 'drained' });
  journal.sort((a, b) => a.at.localeCompare(b.at));
  journal.forEach((e, i) => (e.seq = i + 1));
  return { jobs, journal };
}

function timeRuns(fn) {
  const ms = [];
  for (let r = 0; r < RUNS; r++) {
    const started = process.hrtime.bigint();
    fn();
    ms.push(elapsedMsSince(started));
  }
  return median(ms);
}

async function timeRunsAsync(fn) {
  const ms = [];
  for (let r = 0; r < RUNS; r++) {
    const started = process.hrtime.bigint();
    await fn();
    ms.push(elapsedMsSince(started));
  }
  return median(ms);
}

const { jobs, journal } = synthetic(PAIRS);
const input = {
  batchId: 'bench',
  createdAt: at(0),
  capacity: { maxWorkers: 2, gpuTotalMib: 81920, gpuBaselineMib: 1024, gpuFraction: 0.9 },
  gpuUnobservable: false,
  journal,
  jobs,
  supervisorAlive: false,
  now: at(10_000_000),
};

// 1. In memory. One warm-up of each.
renderReportHtml(buildReportModel(input));
JSON.stringify(input);
let html = '';
let modelJson = '';
const memReport = timeRuns(() => {
  html = renderReportHtml(buildReportModel(input));
});
const model = buildReportModel(input);
const memModel = timeRuns(() => buildReportModel(input));
const memRender = timeRuns(() => renderReportHtml(model));
modelJson = JSON.stringify(model);
const memBaseline = timeRuns(() => JSON.stringify(input));
const htmlBytes = Buffer.byteLength(html);
const jsonBytes = Buffer.byteLength(modelJson);

if (MEMORY_ONLY) {
  console.log(`pairs ${PAIRS}, runs ${RUNS} (medians), in memory only`);
  console.log(
    `model ${memModel.toFixed(1)} ms, HTML ${memRender.toFixed(1)} ms, together ${memReport.toFixed(1)} ms; baseline JSON.stringify(evidence) ${memBaseline.toFixed(1)} ms; ratio ${(memReport / memBaseline).toFixed(2)}`,
  );
  console.log(
    `report.html ${(htmlBytes / 1e6).toFixed(2)} MB; --json model ${(jsonBytes / 1e6).toFixed(2)} MB`,
  );
  process.exit(0);
}

// 2. From disk.
const root = await mkdtemp(join(tmpdir(), 'rg-report-bench-'));
const out = join(root, 'batch');
try {
  await mkdir(join(out, 'jobs'), { recursive: true });
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    image: 'roboguide/pair-driver:1',
    jobs: jobs.map((j) => ({
      job_id: j.job_id,
      argv: ['/opt/driver/run'],
      cwd: '/tmp',
      outcome_path: `/tmp/out/${j.job_id}.json`,
    })),
    capacity: { max_workers: 2, gpu_total_mib: 81920, gpu_baseline_mib: 1024, gpu_fraction: 0.9 },
  };
  await writeFile(join(out, 'manifest.json'), JSON.stringify(manifest));
  await writeFile(
    join(out, 'batch.json'),
    JSON.stringify({
      schema: 'roboguide.e1.batch_identity/v1',
      batch_id: 'bench',
      created_at: at(0),
      gpu_observation: null,
    }),
  );
  await writeFile(join(out, 'events.jsonl'), journal.map((e) => JSON.stringify(e)).join('\n') + '\n');
  for (let i = 0; i < jobs.length; i += 200) {
    await Promise.all(
      jobs.slice(i, i + 200).map(async (j) => {
        const dir = join(out, 'jobs', j.job_id);
        await mkdir(dir);
        await writeFile(join(dir, 'receipt.json'), JSON.stringify(j.receipt, null, 2));
        await writeFile(join(dir, 'result.json'), JSON.stringify(j.result, null, 2));
        await writeFile(join(dir, 'stdout.log'), 'x\n');
        await writeFile(join(dir, 'stderr.log'), '');
      }),
    );
  }
  const store = new EvidenceStore(new NodeFileSystem(), out);
  await writeReport(store, new Date());
  const diskBaseline = await timeRunsAsync(async () => {
    const { manifest: m } = await loadBatch(store);
    await readJobFiles(store, m);
    await store.readJournal();
  });
  const diskReport = await timeRunsAsync(() => writeReport(store, new Date()));

  console.log(`pairs ${PAIRS}, runs ${RUNS} (medians)`);
  console.log(
    `in memory: model ${memModel.toFixed(1)} ms, HTML ${memRender.toFixed(1)} ms; together ${memReport.toFixed(1)} ms; baseline JSON.stringify(evidence) ${memBaseline.toFixed(1)} ms; ratio ${(memReport / memBaseline).toFixed(2)}`,
  );
  console.log(
    `from disk: writeReport ${diskReport.toFixed(1)} ms; baseline read of the same evidence ${diskBaseline.toFixed(1)} ms; ratio ${(diskReport / diskBaseline).toFixed(2)}`,
  );
  console.log(
    `report.html ${(htmlBytes / 1e6).toFixed(2)} MB (${htmlBytes} B); --json model ${(jsonBytes / 1e6).toFixed(2)} MB`,
  );
} finally {
  await rm(root, { recursive: true, force: true });
}
