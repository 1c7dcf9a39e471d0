// Log throughput: a driver prints N bytes of 64-byte lines on stdout; ours streams them through
// attach + redact into stdout.log (runPair, whole lifecycle timed), the baseline is
// `docker run --rm IMAGE ... > file` (the docker CLI writing straight to a file descriptor).
// Same process, alternating runs; prints MB/s (bytes / elapsed, 1 MB = 1e6 B) for both, the ratio
// of the medians and our peak RSS.
// Needs the compiled output and the driver image: `npm run build`, `npx roboguide-eval images build`,
// then `npx node bench/logs.bench.js [totalMiB] [runs]` (defaults: 100 MiB = 104857600 B, 3 runs).
import { spawn } from 'node:child_process';
import { mkdtemp, open, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { elapsedMsSince, IMAGE, median, pairRunDeps, timedPair } from './support.js';

const TOTAL_BYTES = Math.round(Number(process.argv[2] ?? 100) * 2 ** 20);
const RUNS = Number(process.argv[3] ?? 3);
const ACTIONS = [`stdout_bytes=${TOTAL_BYTES}`, 'outcome=completed'];
const RSS_SAMPLE_MS = 50;

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
  const { elapsedMs, dir, output } = await timedPair(deps, root, `bench-logs-${process.pid}-${index}`, ACTIONS, 600);
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

const deps = pairRunDeps();
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
