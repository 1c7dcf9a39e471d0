// The whole-process `pair run` measured the user's way (issue 39): `roboguide-eval pair run --spec S` as its own
// process (the pinned Node, the launcher's compile cache, a private registry), from spawn to exit, against
// `docker run --rm --network roboguide-pairs` of the same container with the same bind mounts (the cwd and the
// outcome folder), working directory and environment. Side by side, alternating, the order rotating each run (the
// load drifts); one warm-up of each. `BASELINE_ROOT=<another checkout, built>` adds that checkout's CLI (e.g. main
// before this work) in the same alternation.
// Needs the build and the driver image: `npm run build`, `bin/roboguide-eval images build`, then
// `node bench/pair-run.bench.js [runs]` (default 10). Prints medians, the ratio ours / docker (aim <= 1.5), the median
// of each round's own ratio (and, with a baseline, of each round's difference), and the load average before and after.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { elapsedMsSince, IMAGE, median } from './support.js';

const RUNS = Number(process.argv[2] ?? 10);
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const NETWORK = 'roboguide-pairs';
const ACTIONS = ['outcome=completed'];
const BUILDS = [{ name: 'ours', root: ROOT }];
if (process.env.BASELINE_ROOT) BUILDS.push({ name: 'baseline', root: resolve(process.env.BASELINE_ROOT) });

function timedSpawn(command, args, env = process.env) {
  const started = process.hrtime.bigint();
  return new Promise((resolveRun, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'ignore', 'pipe'], env });
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code === 0) resolveRun(elapsedMsSince(started));
      else reject(new Error(`${command} ${args.slice(0, 3).join(' ')} exited ${code}: ${err.slice(-2000)}`));
    });
  });
}

const root = await mkdtemp(join(tmpdir(), 'rg-pair-run-bench-'));
let seq = 0;

/** A fresh pair folder: its cwd, where its outcome goes, and the spec that says so. */
async function pairDir(kind) {
  const dir = join(root, `${kind}-${(seq += 1)}`);
  await mkdir(join(dir, 'cwd'), { recursive: true });
  return {
    dir,
    spec: {
      job_id: `bench-pair-run-${process.pid}-${seq}`,
      argv: ['/opt/driver/run', ...ACTIONS],
      cwd: join(dir, 'cwd'),
      outcome_path: join(dir, 'out', 'outcome.json'),
      timeout_seconds: 120,
      image: IMAGE,
    },
  };
}

async function oursOnce(build) {
  const { dir, spec } = await pairDir(build.name);
  const specPath = join(dir, 'spec.json');
  await writeFile(specPath, JSON.stringify(spec));
  // The launcher a user runs (bin/roboguide-eval: the pinned Node, no npx). With a baseline, each build keeps its
  // compile cache in a folder of its own: two builds share the names of their cache files, and each would throw the
  // other's away at every run (a start without the cache, both sides).
  const env =
    BUILDS.length > 1 ? { ...process.env, XDG_CACHE_HOME: join(root, `cache-${build.name}`) } : process.env;
  const ms = await timedSpawn(
    join(build.root, 'bin', 'roboguide-eval'),
    [
      'pair',
      'run',
      '--spec',
      specPath,
      '--output',
      join(dir, 'evidence'),
      '--registry',
      join(root, 'registry.db'),
      '--json',
    ],
    env,
  );
  if (!existsSync(join(dir, 'evidence', 'result.json'))) throw new Error(`${build.name}: no result.json`);
  await rm(dir, { recursive: true, force: true });
  return ms;
}

async function dockerOnce() {
  const { dir, spec } = await pairDir('docker');
  const out = join(dir, 'out');
  await mkdir(out, { recursive: true });
  const ms = await timedSpawn('docker', [
    'run',
    '--rm',
    '--network',
    NETWORK,
    '-v',
    `${spec.cwd}:${spec.cwd}`,
    '-v',
    `${out}:${out}`,
    '-w',
    spec.cwd,
    '-e',
    `ROBOGUIDE_JOB_ID=${spec.job_id}`,
    '-e',
    `ROBOGUIDE_OUTCOME_PATH=${spec.outcome_path}`,
    IMAGE,
    ...spec.argv,
  ]);
  if (!existsSync(spec.outcome_path)) throw new Error('docker: no outcome written');
  await rm(dir, { recursive: true, force: true });
  return ms;
}

try {
  const steps = [
    ...BUILDS.map((b) => ({ name: b.name, once: () => oursOnce(b) })),
    { name: 'docker', once: dockerOnce },
  ];
  for (const step of steps) await step.once(); // warm-up: compile cache, image layers, the engine's network
  const loadBefore = loadavg();
  const times = Object.fromEntries(steps.map((s) => [s.name, []]));
  for (let r = 0; r < RUNS; r += 1) {
    const order = [...steps];
    for (let k = 0; k < r % order.length; k += 1) order.push(order.shift());
    for (const step of order) times[step.name].push(await step.once());
  }
  const fmt = (values) => values.map((v) => v.toFixed(0)).join(' ');
  const load = (l) => l.map((v) => v.toFixed(2)).join(' ');
  const d = median(times.docker);
  console.log(
    `pair run bench: whole process, no-op pair, ${RUNS} runs each, alternating; load average ${load(loadBefore)} -> ${load(loadavg())}`,
  );
  console.log(`  docker run --rm --network ${NETWORK}: median ${d.toFixed(0)} ms  [${fmt(times.docker)}]`);
  for (const b of BUILDS) {
    const m = median(times[b.name]);
    console.log(
      `  ${b.name} pair run: median ${m.toFixed(0)} ms  [${fmt(times[b.name])}]  ratio ${(m / d).toFixed(2)}  (aim <= 1.5)`,
    );
  }
  // Each round runs every step back to back: the round's own ratio and difference are less moved by the load's drift
  // over the minute than the medians of each column.
  const perRound = (f) => times.docker.map((_, r) => f(r));
  for (const b of BUILDS) {
    const ratios = perRound((r) => times[b.name][r] / times.docker[r]);
    console.log(`  ${b.name}: median of the rounds' ratios to docker ${median(ratios).toFixed(3)}`);
  }
  if (BUILDS.length > 1) {
    const diffs = perRound((r) => times.ours[r] - times.baseline[r]);
    const faster = diffs.filter((x) => x < 0).length;
    console.log(
      `  ours - baseline: median of the rounds' differences ${median(diffs).toFixed(1)} ms, ours faster in ${faster} of ${RUNS} rounds`,
    );
  }
} finally {
  await rm(root, { recursive: true, force: true });
}
