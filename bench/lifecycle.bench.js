// Overhead of one pair lifecycle through our code (runPair: receipt, create, attach + redact, wait,
// outcome, sessions, remove, verify absent, result.json) against a bare `docker run --rm` of the same
// no-op driver. Same process, alternating, medians of N runs each, after one warm-up of each (the warm-up pair
// also teaches the process that the image's sessions dir is empty, as the first pair of a batch does); a third
// series runs our lifecycle with the sessions dir always copied (what every pair paid before the skip).
// Then the whole process: `node bin/run.js pair run --spec S` (the pinned Node, a fresh process per pair, so the
// sessions dir is always copied) against the same `docker run --rm`, alternating, medians.
// Needs the compiled output and the driver image: `npm run build`, `npx roboguide-eval images build`,
// then `node bench/lifecycle.bench.js [runs] [processRuns]` (defaults 10 and 5; processRuns 0 skips that part).
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { elapsedMsSince, IMAGE, median, pairRunDeps, timedPair } from './support.js';

const RUNS = Number(process.argv[2] ?? 10);
const PROCESS_RUNS = Number(process.argv[3] ?? 5);
const ACTIONS = ['outcome=completed'];
const BIN_RUN = fileURLToPath(new URL('../bin/run.js', import.meta.url));

async function oursOnce(deps, root, index) {
  return (await timedPair(deps, root, `bench-lifecycle-${process.pid}-${index}`, ACTIONS, 120)).elapsedMs;
}

function timedSpawn(command, args) {
  const started = process.hrtime.bigint();
  return new Promise((resolveRun, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'ignore', 'inherit'] });
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code === 0) resolveRun(elapsedMsSince(started));
      else reject(new Error(`${command} ${args.slice(0, 3).join(' ')} exited ${code}`));
    });
  });
}

function baselineOnce() {
  return timedSpawn('docker', ['run', '--rm', IMAGE, '/opt/driver/run', ...ACTIONS]);
}

/** `pair run` in a fresh process of the pinned Node (the one running this bench), with a private registry. */
async function processOnce(root, index) {
  const jobId = `bench-process-${process.pid}-${index}`;
  const dir = join(root, jobId);
  await mkdir(join(dir, 'cwd'), { recursive: true });
  const spec = {
    job_id: jobId,
    argv: ['/opt/driver/run', ...ACTIONS],
    cwd: join(dir, 'cwd'),
    outcome_path: join(dir, 'out', 'outcome.json'),
    timeout_seconds: 120,
    image: IMAGE,
  };
  const specPath = join(dir, 'spec.json');
  await writeFile(specPath, JSON.stringify(spec));
  return timedSpawn(process.execPath, [
    BIN_RUN,
    'pair',
    'run',
    '--spec',
    specPath,
    '--output',
    join(dir, 'evidence'),
    '--registry',
    join(root, 'registry.db'),
    '--json',
  ]);
}

const deps = pairRunDeps();
// The same adapters without what the process learned about images: the sessions dir is copied out every time.
const alwaysCopy = { ...deps, imageSessions: undefined };
const root = await mkdtemp(join(tmpdir(), 'lifecycle-bench-'));
try {
  const loadBefore = loadavg()[0];
  await oursOnce(deps, root, 'warmup'); // JIT, image metadata, docker socket, what the image holds at its sessions dir
  await baselineOnce();
  const ours = [];
  const baseline = [];
  const copying = [];
  for (let run = 0; run < RUNS; run += 1) {
    ours.push(await oursOnce(deps, root, run));
    baseline.push(await baselineOnce());
    copying.push(await oursOnce(alwaysCopy, root, `copy-${run}`));
  }
  const oursMs = median(ours);
  const baselineMs = median(baseline);
  const loadMid = loadavg()[0];
  const whole = [];
  const wholeBaseline = [];
  if (PROCESS_RUNS > 0) await processOnce(root, 'warmup');
  for (let run = 0; run < PROCESS_RUNS; run += 1) {
    whole.push(await processOnce(root, run));
    wholeBaseline.push(await baselineOnce());
  }
  console.log(
    `lifecycle bench: no-op driver (${ACTIONS.join(' ')}), image ${IMAGE}, alternating; load average ${loadBefore.toFixed(2)} -> ${loadMid.toFixed(2)} -> ${loadavg()[0].toFixed(2)}`,
  );
  console.log(`  in process, ${RUNS} runs each:`);
  console.log(
    `    ours (runPair)      : median ${oursMs.toFixed(1)} ms  [${ours.map((v) => v.toFixed(0)).join(' ')}]`,
  );
  console.log(
    `    docker run --rm     : median ${baselineMs.toFixed(1)} ms  [${baseline.map((v) => v.toFixed(0)).join(' ')}]`,
  );
  console.log(`    ratio ours/baseline : ${(oursMs / baselineMs).toFixed(2)}  (aim <= 0.9)`);
  const copyingMs = median(copying);
  console.log(
    `    ours, sessions always copied : median ${copyingMs.toFixed(1)} ms  [${copying.map((v) => v.toFixed(0)).join(' ')}]  ratio ${(copyingMs / baselineMs).toFixed(2)}`,
  );
  if (PROCESS_RUNS > 0) {
    const wholeMs = median(whole);
    const wholeBaselineMs = median(wholeBaseline);
    console.log(`  whole process, ${PROCESS_RUNS} runs each:`);
    console.log(
      `    node bin/run.js pair run : median ${wholeMs.toFixed(1)} ms  [${whole.map((v) => v.toFixed(0)).join(' ')}]`,
    );
    console.log(
      `    docker run --rm          : median ${wholeBaselineMs.toFixed(1)} ms  [${wholeBaseline.map((v) => v.toFixed(0)).join(' ')}]`,
    );
    console.log(`    ratio ours/baseline      : ${(wholeMs / wholeBaselineMs).toFixed(2)}  (aim <= 1.2)`);
  }
} finally {
  await rm(root, { recursive: true, force: true });
}
