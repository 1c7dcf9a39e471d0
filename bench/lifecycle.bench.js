// Overhead of one pair lifecycle through our code (runPair: receipt, create, attach + redact, wait,
// outcome, sessions archive, remove, verify absent, result.json) against a bare `docker run --rm`
// of the same no-op driver. Same process, alternating, medians of N runs each.
// Needs the compiled output and the driver image: `npm run build`, `npx roboguide-eval images build`,
// then `node bench/lifecycle.bench.js [runs]` (default 10).
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { elapsedMsSince, IMAGE, median, pairRunDeps, timedPair } from './support.js';

const RUNS = Number(process.argv[2] ?? 10);
const ACTIONS = ['outcome=completed'];

async function oursOnce(deps, root, index) {
  return (await timedPair(deps, root, `bench-lifecycle-${process.pid}-${index}`, ACTIONS, 120)).elapsedMs;
}

function baselineOnce() {
  const started = process.hrtime.bigint();
  return new Promise((resolveRun, reject) => {
    const child = spawn('docker', ['run', '--rm', IMAGE, '/opt/driver/run', ...ACTIONS], { stdio: ['ignore', 'ignore', 'inherit'] });
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code === 0) resolveRun(elapsedMsSince(started));
      else reject(new Error(`docker run exited ${code}`));
    });
  });
}

const deps = pairRunDeps();
const root = await mkdtemp(join(tmpdir(), 'lifecycle-bench-'));
try {
  await oursOnce(deps, root, 'warmup'); // JIT, image metadata, docker socket
  await baselineOnce();
  const ours = [];
  const baseline = [];
  for (let run = 0; run < RUNS; run += 1) {
    ours.push(await oursOnce(deps, root, run));
    baseline.push(await baselineOnce());
  }
  const oursMs = median(ours);
  const baselineMs = median(baseline);
  console.log(`lifecycle bench: no-op driver (${ACTIONS.join(' ')}), ${RUNS} runs each, alternating`);
  console.log(`  ours (runPair)      : median ${oursMs.toFixed(1)} ms  [${ours.map((v) => v.toFixed(0)).join(' ')}]`);
  console.log(`  docker run --rm     : median ${baselineMs.toFixed(1)} ms  [${baseline.map((v) => v.toFixed(0)).join(' ')}]`);
  console.log(`  ratio ours/baseline : ${(oursMs / baselineMs).toFixed(2)}`);
} finally {
  await rm(root, { recursive: true, force: true });
}
