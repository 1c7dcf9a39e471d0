// Log throughput and memory: the driver writes N bytes of 64-byte lines on stdout, 1 MiB per write from a buffer
// file the image holds (`big_stdout=N`: one `cat` of that file N/1MiB times, sendfile into the pipe; faster than
// the engine ships it). Ours streams them through attach + demux + redact into stdout.log (runPair, whole
// lifecycle timed); the baseline is `docker run --rm IMAGE ... > file` (the docker CLI writing straight to a file
// descriptor). Same process, alternating runs, for each volume; prints MB/s (bytes / elapsed, 1 MB = 1e6 B) for
// both, the ratio of the medians, our peak RSS per volume (sampled every 50 ms, and its growth over the RSS before
// the run), and the load average.
// Needs the compiled output and the driver image: `npm run build`, `npx roboguide-eval images build`,
// then `npx node bench/logs.bench.js [MiB,MiB,...] [runs]` (defaults: 100,400 MiB, 3 runs). With
// BASELINE_DIST=<another build's dist folder (absolute)>, that build's lifecycle runs as a third series in the same
// alternation (before/after of a change, side by side).
import { spawn } from 'node:child_process';
import { mkdtemp, open, rm, stat } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { elapsedMsSince, IMAGE, median, pairRunDeps, pairRunDepsFrom, timedPair } from './support.js';

const VOLUMES_MIB = String(process.argv[2] ?? '100,400')
  .split(',')
  .map(Number);
const RUNS = Number(process.argv[3] ?? 3);
const RSS_SAMPLE_MS = 50;
const MiB = 2 ** 20;

function mbPerSec(bytes, elapsedMs) {
  return bytes / 1e6 / (elapsedMs / 1000);
}

async function expectSize(path, bytes) {
  const { size } = await stat(path);
  if (size !== bytes) throw new Error(`${path}: ${size} B, expected ${bytes} B`);
}

/** Largest RSS seen while `work` runs (sampled), and the RSS just before. */
async function withRssPeak(work) {
  const beforeBytes = process.memoryUsage.rss();
  let peakBytes = beforeBytes;
  const timer = setInterval(() => {
    peakBytes = Math.max(peakBytes, process.memoryUsage.rss());
  }, RSS_SAMPLE_MS);
  try {
    const value = await work();
    return { value, beforeBytes, peakBytes: Math.max(peakBytes, process.memoryUsage.rss()) };
  } finally {
    clearInterval(timer);
  }
}

async function oursOnce(deps, root, actions, bytes, index) {
  const { elapsedMs, dir, output } = await timedPair(
    deps,
    root,
    `bench-logs-${process.pid}-${index}`,
    actions,
    600,
  );
  await expectSize(join(output, 'stdout.log'), bytes);
  await rm(dir, { recursive: true, force: true });
  return elapsedMs;
}

async function baselineOnce(root, actions, bytes, index) {
  const path = join(root, `baseline-${index}.log`);
  const file = await open(path, 'w');
  const started = process.hrtime.bigint();
  try {
    await new Promise((resolveRun, reject) => {
      const child = spawn('docker', ['run', '--rm', IMAGE, '/opt/driver/run', ...actions], {
        stdio: ['ignore', file.fd, 'inherit'],
      });
      child.on('error', reject);
      child.on('exit', (code) =>
        code === 0 ? resolveRun() : reject(new Error(`docker run exited ${code}`)),
      );
    });
  } finally {
    await file.close();
  }
  const elapsedMs = elapsedMsSince(started);
  await expectSize(path, bytes);
  await rm(path, { force: true });
  return elapsedMs;
}

const deps = pairRunDeps();
const baselineDeps = process.env.BASELINE_DIST ? await pairRunDepsFrom(process.env.BASELINE_DIST) : null;
const root = await mkdtemp(join(tmpdir(), 'logs-bench-'));
try {
  const loadBefore = loadavg()[0];
  const lines = [];
  // One warm-up of each (JIT, image metadata, the docker socket), not counted.
  await oursOnce(deps, root, ['big_stdout=1048576', 'outcome=completed'], MiB, 'warmup');
  await baselineOnce(root, ['big_stdout=1048576', 'outcome=completed'], MiB, 'warmup');
  if (baselineDeps)
    await oursOnce(baselineDeps, root, ['big_stdout=1048576', 'outcome=completed'], MiB, 'warmup-base');
  for (const mib of VOLUMES_MIB) {
    const bytes = Math.round(mib * MiB);
    const actions = [`big_stdout=${bytes}`, 'outcome=completed'];
    const ours = [];
    const baseline = [];
    const before = [];
    let peakBytes = 0;
    let growthBytes = 0;
    for (let run = 0; run < RUNS; run += 1) {
      const sampled = await withRssPeak(() => oursOnce(deps, root, actions, bytes, `${mib}-${run}`));
      ours.push(sampled.value);
      peakBytes = Math.max(peakBytes, sampled.peakBytes);
      growthBytes = Math.max(growthBytes, sampled.peakBytes - sampled.beforeBytes);
      baseline.push(await baselineOnce(root, actions, bytes, `${mib}-${run}`));
      if (baselineDeps) before.push(await oursOnce(baselineDeps, root, actions, bytes, `${mib}-${run}-base`));
    }
    const oursRates = ours.map((ms) => mbPerSec(bytes, ms));
    const baselineRates = baseline.map((ms) => mbPerSec(bytes, ms));
    const oursMedian = median(oursRates);
    const baselineMedian = median(baselineRates);
    lines.push(
      `  ${mib} MiB (${bytes} B), ${RUNS} runs each:`,
      `    ours (attach+redact) : median ${oursMedian.toFixed(1)} MB/s  [${oursRates.map((v) => v.toFixed(1)).join(' ')}]`,
      `    docker run > file    : median ${baselineMedian.toFixed(1)} MB/s  [${baselineRates.map((v) => v.toFixed(1)).join(' ')}]`,
      `    ratio ours/baseline  : ${(oursMedian / baselineMedian).toFixed(2)} (rates; wall time ours/baseline ${(median(ours) / median(baseline)).toFixed(2)}, issue 26 aim <= 1.0)`,
      ...(baselineDeps
        ? [
            `    BASELINE_DIST build  : median ${median(before.map((ms) => mbPerSec(bytes, ms))).toFixed(1)} MB/s, ratio to docker run ${(median(before.map((ms) => mbPerSec(bytes, ms))) / baselineMedian).toFixed(2)}`,
          ]
        : []),
      `    our peak RSS         : ${(peakBytes / MiB).toFixed(1)} MiB sampled (at most +${(growthBytes / MiB).toFixed(1)} MiB over the RSS before the run)`,
    );
  }
  console.log(
    `logs bench: big_stdout (1 MiB writes of 64-byte lines), image ${IMAGE}, alternating; load average ${loadBefore.toFixed(2)} -> ${loadavg()[0].toFixed(2)}`,
  );
  for (const line of lines) console.log(line);
  console.log(
    `  process maxRSS        : ${(process.resourceUsage().maxRSS / 1024).toFixed(1)} MiB (whole run)`,
  );
} finally {
  await rm(root, { recursive: true, force: true });
}
