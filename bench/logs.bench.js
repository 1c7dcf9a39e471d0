// Log throughput: a driver prints N bytes of 64-byte lines on stdout; ours streams them through
// attach + redact into stdout.log (runPair, whole lifecycle timed), the baseline is
// `docker run --rm IMAGE ... > file` (the docker CLI writing straight to a file descriptor).
// Same process, alternating runs; prints MB/s (bytes / elapsed, 1 MB = 1e6 B) for both, the ratio
// of the medians and our peak RSS.
// Needs the compiled output and the driver image: `npm run build`, `npx roboguide-eval images build`,
// then `npx node bench/logs.bench.js [totalMiB] [runs]` (defaults: 100 MiB = 104857600 B, 3 runs).
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { mkdir, mkdtemp, open, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NodeFileSystem } from '../dist/adapters/fs/node-file-system.js';
import { silentLogger } from '../dist/app/ports/logger.js';
import { runPair } from '../dist/app/run-pair.js';
import { createContainerRuntime, createExecutePairDeps } from '../dist/composition-root.js';
import { SqliteCapacityRegistry } from '../dist/adapters/registry/sqlite-capacity-registry.js';

const IMAGE = 'roboguide/pair-driver:1';
const TOTAL_BYTES = Math.round(Number(process.argv[2] ?? 100) * 2 ** 20);
const RUNS = Number(process.argv[3] ?? 3);
const ACTIONS = [`stdout_bytes=${TOTAL_BYTES}`, 'outcome=completed'];
const RSS_SAMPLE_MS = 50;

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

function elapsedMsSince(started) {
  return Number(process.hrtime.bigint() - started) / 1e6;
}

function mbPerSec(bytes, elapsedMs) {
  return bytes / 1e6 / (elapsedMs / 1000);
}

async function expectSize(path, bytes) {
  const { size } = await stat(path);
  if (size !== bytes) throw new Error(`${path}: ${size} B, expected ${bytes} B`);
}

/** Largest RSS seen while `work` runs (sampled), besides the kernel's lifetime maxRSS. */
async function withRssPeak(work) {
  let peakBytes = process.memoryUsage.rss();
  const timer = setInterval(() => {
    peakBytes = Math.max(peakBytes, process.memoryUsage.rss());
  }, RSS_SAMPLE_MS);
  try {
    const value = await work();
    return { value, peakBytes: Math.max(peakBytes, process.memoryUsage.rss()) };
  } finally {
    clearInterval(timer);
  }
}

async function oursOnce(deps, root, index) {
  const jobId = `bench-logs-${process.pid}-${index}`;
  const dir = join(root, jobId);
  const cwd = join(dir, 'cwd');
  await mkdir(cwd, { recursive: true });
  const spec = {
    job_id: jobId,
    argv: ['/opt/driver/run', ...ACTIONS],
    cwd,
    outcome_path: join(dir, 'out', 'outcome.json'),
    environment: {},
    ports: [],
    timeout_seconds: 600,
    image: IMAGE,
  };
  const output = join(dir, 'evidence');
  const started = process.hrtime.bigint();
  const { result } = await runPair(deps, {
    specText: JSON.stringify(spec),
    specSource: `${jobId}.json`,
    output,
    bindAddress: '127.0.0.1',
    environment: {},
    codeVersion: 'bench',
    cwd: dir,
  });
  const elapsedMs = elapsedMsSince(started);
  if (result.classification !== 'completed') {
    throw new Error(`${jobId}: expected completed, got ${result.classification} ${JSON.stringify(result.reasons)}`);
  }
  await expectSize(join(output, 'stdout.log'), TOTAL_BYTES);
  await rm(dir, { recursive: true, force: true });
  return elapsedMs;
}

async function baselineOnce(root, index) {
  const path = join(root, `baseline-${index}.log`);
  const file = await open(path, 'w');
  const started = process.hrtime.bigint();
  try {
    await new Promise((resolveRun, reject) => {
      const child = spawn('docker', ['run', '--rm', IMAGE, '/opt/driver/run', ...ACTIONS], { stdio: ['ignore', file.fd, 'inherit'] });
      child.on('error', reject);
      child.on('exit', (code) => (code === 0 ? resolveRun() : reject(new Error(`docker run exited ${code}`))));
    });
  } finally {
    await file.close();
  }
  const elapsedMs = elapsedMsSince(started);
  await expectSize(path, TOTAL_BYTES);
  await rm(path, { force: true });
  return elapsedMs;
}

// A private registry: the bench's pairs take and give back slots like any pair, without touching the host's.
const registry = SqliteCapacityRegistry.open({ path: join(mkdtempSync(join(tmpdir(), 'rg-bench-registry-')), 'registry.db') });
const deps = { ...createExecutePairDeps(createContainerRuntime(), silentLogger), fs: new NodeFileSystem(), registry };
const root = await mkdtemp(join(tmpdir(), 'logs-bench-'));
try {
  const ours = [];
  const baseline = [];
  let peakRssBytes = 0;
  for (let run = 0; run < RUNS; run += 1) {
    const sampled = await withRssPeak(() => oursOnce(deps, root, run));
    ours.push(sampled.value);
    peakRssBytes = Math.max(peakRssBytes, sampled.peakBytes);
    baseline.push(await baselineOnce(root, run));
  }
  const oursRates = ours.map((ms) => mbPerSec(TOTAL_BYTES, ms));
  const baselineRates = baseline.map((ms) => mbPerSec(TOTAL_BYTES, ms));
  const oursMedian = median(oursRates);
  const baselineMedian = median(baselineRates);
  const maxRssMiB = process.resourceUsage().maxRSS / 1024; // maxRSS is in KiB
  console.log(`logs bench: ${TOTAL_BYTES} B of 64-byte lines on stdout, ${RUNS} runs each, alternating`);
  console.log(`  ours (attach+redact) : median ${oursMedian.toFixed(1)} MB/s  [${oursRates.map((v) => v.toFixed(1)).join(' ')}]`);
  console.log(`  docker run > file    : median ${baselineMedian.toFixed(1)} MB/s  [${baselineRates.map((v) => v.toFixed(1)).join(' ')}]`);
  console.log(`  ratio ours/baseline  : ${(oursMedian / baselineMedian).toFixed(2)}`);
  console.log(`  our peak RSS         : ${(peakRssBytes / 2 ** 20).toFixed(1)} MiB sampled, ${maxRssMiB.toFixed(1)} MiB maxRSS`);
} finally {
  await rm(root, { recursive: true, force: true });
}
