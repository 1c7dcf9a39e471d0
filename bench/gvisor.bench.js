// The pair lifecycle under gVisor (issue 29): one no-op pair through our code (runPair: receipt, create, attach +
// redact, wait, outcome, sessions, remove, verify absent, result.json) under runsc, against the same under runc, and
// against a bare `docker run --rm --runtime runsc` (and `docker run --rm`) of the same driver. All four series
// alternate in one process, network "none" everywhere (runsc on an engine in a namespace of its own runs with
// --network=none), medians of N runs each after one warm-up of each.
// Needs the compiled output, the driver image and an engine that registers runsc, named by DOCKER_HOST (e.g. a
// throwaway one: docs/benchmarks.md, "gvisor"): `DOCKER_HOST=unix:///… node bench/gvisor.bench.js [runs]` (default 10).
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { runPair } from '../dist/app/pair/run-pair.js';
import { createContainerRuntime } from '../dist/composition-root.js';
import { elapsedMsSince, IMAGE, median, pairRunDeps } from './support.js';

const RUNS = Number(process.argv[2] ?? 10);
const RUNTIME = process.env.BENCH_RUNTIME ?? 'runsc';
const ACTIONS = ['outcome=completed'];

async function oursOnce(deps, root, runtime, index) {
  const jobId = `bench-gvisor-${runtime}-${process.pid}-${index}`;
  const dir = join(root, jobId);
  const cwd = join(dir, 'cwd');
  await mkdir(cwd, { recursive: true });
  const spec = {
    job_id: jobId,
    argv: ['/opt/driver/run', ...ACTIONS],
    cwd,
    outcome_path: join(dir, 'out', 'outcome.json'),
    timeout_seconds: 120,
    image: IMAGE,
    network: 'none',
    runtime,
  };
  const started = process.hrtime.bigint();
  const { result } = await runPair(deps, {
    specText: JSON.stringify(spec),
    specSource: `${jobId}.json`,
    output: join(dir, 'evidence'),
    bindAddress: '127.0.0.1',
    environment: {},
    codeVersion: 'bench',
    cwd: dir,
  });
  const ms = elapsedMsSince(started);
  if (result.classification !== 'completed')
    throw new Error(
      `${jobId}: expected completed, got ${result.classification} ${JSON.stringify(result.reasons)}`,
    );
  return ms;
}

function dockerRunOnce(runtime) {
  const started = process.hrtime.bigint();
  return new Promise((resolveRun, reject) => {
    const child = spawn(
      'docker',
      ['run', '--rm', '--network', 'none', '--runtime', runtime, IMAGE, '/opt/driver/run', ...ACTIONS],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    );
    child.on('error', reject);
    child.on('exit', (code) =>
      code === 0
        ? resolveRun(elapsedMsSince(started))
        : reject(new Error(`docker run --runtime ${runtime} exited ${code}`)),
    );
  });
}

const info = await createContainerRuntime().info();
if (!info.runtimes.includes(RUNTIME)) {
  console.error(
    `the engine (DOCKER_HOST=${process.env.DOCKER_HOST ?? 'default'}) does not register "${RUNTIME}" (its runtimes: ${info.runtimes.join(', ')}): see docs/benchmarks.md, "gvisor"`,
  );
  process.exit(2);
}
const deps = pairRunDeps();
const root = await mkdtemp(join(tmpdir(), 'gvisor-bench-'));
const fmt = (values) => values.map((v) => v.toFixed(0)).join(' ');
try {
  const loadBefore = loadavg()[0];
  await oursOnce(deps, root, 'runc', 'warmup');
  await oursOnce(deps, root, RUNTIME, 'warmup');
  await dockerRunOnce(RUNTIME);
  await dockerRunOnce('runc');
  const series = { oursRunc: [], oursGvisor: [], dockerGvisor: [], dockerRunc: [] };
  for (let run = 0; run < RUNS; run += 1) {
    series.oursGvisor.push(await oursOnce(deps, root, RUNTIME, run));
    series.oursRunc.push(await oursOnce(deps, root, 'runc', run));
    series.dockerGvisor.push(await dockerRunOnce(RUNTIME));
    series.dockerRunc.push(await dockerRunOnce('runc'));
  }
  const m = Object.fromEntries(Object.entries(series).map(([k, v]) => [k, median(v)]));
  console.log(
    `gvisor bench: no-op driver (${ACTIONS.join(' ')}), image ${IMAGE}, network none, runtime "${RUNTIME}" vs runc, ${RUNS} runs each, alternating; load average ${loadBefore.toFixed(2)} -> ${loadavg()[0].toFixed(2)}`,
  );
  console.log(
    `  ours under ${RUNTIME}              : median ${m.oursGvisor.toFixed(1)} ms  [${fmt(series.oursGvisor)}]`,
  );
  console.log(
    `  ours under runc               : median ${m.oursRunc.toFixed(1)} ms  [${fmt(series.oursRunc)}]`,
  );
  console.log(
    `  docker run --rm --runtime ${RUNTIME} : median ${m.dockerGvisor.toFixed(1)} ms  [${fmt(series.dockerGvisor)}]`,
  );
  console.log(
    `  docker run --rm (runc)        : median ${m.dockerRunc.toFixed(1)} ms  [${fmt(series.dockerRunc)}]`,
  );
  console.log(
    `  ratio ours ${RUNTIME}/runc          : ${(m.oursGvisor / m.oursRunc).toFixed(2)}  (+${(m.oursGvisor - m.oursRunc).toFixed(0)} ms per pair)`,
  );
  console.log(`  ratio ours/docker run, ${RUNTIME}   : ${(m.oursGvisor / m.dockerGvisor).toFixed(2)}`);
  console.log(`  ratio docker run ${RUNTIME}/runc    : ${(m.dockerGvisor / m.dockerRunc).toFixed(2)}`);
} finally {
  await rm(root, { recursive: true, force: true });
}
