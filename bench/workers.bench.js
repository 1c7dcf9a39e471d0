// Do two workers pay off? The makespan of N equal pairs (the driver sleeps S seconds, then writes its outcome)
// through the real batch supervisor (`supervise`, in process, as `e1-batch start --foreground` runs it), with
// `capacity.max_workers` 2 and a private registry whose host limit is 2, against the same batch with 1 worker.
// The dispatch policy runs the first pair alone, so the best two workers can do is (1 + (N-1)/2) / N of serial
// (0.525 for 20 pairs). Alternating runs, medians; prints the ratio two/one (aim <= 0.6) and the load average.
// Needs the compiled output and the driver image: `npm run build`, `npx roboguide-eval images build`,
// then `npx node bench/workers.bench.js [pairs] [runs] [sleepSeconds]` (defaults 20, 3, 1). `BASELINE_DIST=<dist folder>`
// adds the two-worker batch on another build, alternating; `BENCH_ONE_WORKER=0` leaves out the one-worker batches.
// Issue 26's line compares two workers with bare `docker run --rm` two at a time; with the pairs on the guarded
// network (the default: ROBOGUIDE_PAIRS_NETWORK unset) the same containers also run on that network, so that the
// engine's cost of the network shows apart from ours (`ROBOGUIDE_PAIRS_NETWORK=engine-bridge` puts our pairs on the
// engine's default bridge, where plain `docker run` is).
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { elapsedMsSince, IMAGE, median } from './support.js';

const PAIRS = Number(process.argv[2] ?? 20);
const RUNS = Number(process.argv[3] ?? 3);
const SLEEP_S = Number(process.argv[4] ?? 1);

/**
 * The compiled output a batch runs on: ours (`dist/`) and, with `BASELINE_DIST=<folder>` (the `dist/` of a build of
 * another commit, with `node_modules` beside it), the same batch on that build, alternating, side by side.
 */
async function loadDist(dist) {
  const at = (rel) => import(pathToFileURL(join(dist, rel)).href);
  return {
    EvidenceStore: (await at('app/evidence/evidence-store.js')).EvidenceStore,
    NodeFileSystem: (await at('adapters/fs/node-file-system.js')).NodeFileSystem,
    SqliteCapacityRegistry: (await at('adapters/registry/sqlite-capacity-registry.js'))
      .SqliteCapacityRegistry,
    prepareBatch: (await at('app/batch/start-batch.js')).prepareBatch,
    supervise: (await at('app/batch/supervisor.js')).supervise,
    systemClock: (await at('adapters/system-clock.js')).systemClock,
    silentLogger: (await at('app/ports/logger.js')).silentLogger,
    createContainerRuntime: (await at('composition-root.js')).createContainerRuntime,
    createExecutePairDeps: (await at('composition-root.js')).createExecutePairDeps,
    hostIdentity: (await at('composition-root.js')).hostIdentity,
  };
}
const ours = await loadDist(new URL('../dist/', import.meta.url).pathname);
const baseline = process.env.BASELINE_DIST ? await loadDist(resolve(process.env.BASELINE_DIST)) : null;
// BENCH_ONE_WORKER=0 leaves out the one-worker series, ours and the engine's (issue 26's line needs only the two-worker ones).
const ONE_WORKER = process.env.BENCH_ONE_WORKER !== '0';
const { SqliteCapacityRegistry } = ours;
const root = await mkdtemp(join(tmpdir(), 'workers-bench-'));
const registryPath = join(root, 'registry.db');
const setup = SqliteCapacityRegistry.open({ path: registryPath });
setup.setLimits({ maxReservations: 2, gpuMib: null });
setup.close();

/** One whole batch of PAIRS pairs with `workers` workers; returns its makespan (prepare excluded) in ms. */
async function batchOnce(workers, index, lib = ours) {
  const {
    EvidenceStore,
    NodeFileSystem,
    SqliteCapacityRegistry,
    prepareBatch,
    supervise,
    systemClock,
    silentLogger,
    createContainerRuntime,
    createExecutePairDeps,
    hostIdentity,
  } = lib;
  const runtime = createContainerRuntime();
  const name = `w${workers}-${index}${lib === ours ? '' : '-base'}`;
  const dir = join(root, name);
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    image: IMAGE,
    jobs: Array.from({ length: PAIRS }, (_, i) => ({
      job_id: `p${String(i).padStart(3, '0')}`,
      // A GPU observation (usage=) lets the dispatch policy admit the second worker after the first result.
      argv: ['/opt/driver/run', `sleep=${SLEEP_S}`, 'usage=1000', 'outcome=completed'],
      cwd: join(dir, 'cwd'),
      outcome_path: join(dir, 'out', `p${i}.json`),
      timeout_seconds: 120,
    })),
    capacity: { max_workers: workers, gpu_total_mib: 80000, gpu_baseline_mib: 0, gpu_fraction: 0.9 },
    stop_budget_seconds: 5,
  };
  const manifestPath = join(root, `${name}.json`);
  await writeFile(manifestPath, JSON.stringify(manifest));
  const output = join(dir, 'batch');
  const fs = new NodeFileSystem();
  await prepareBatch(
    { fs, runtime, clock: systemClock, host: hostIdentity },
    { manifestPath, output, registryPath, bindAddress: '127.0.0.1', environment: {}, codeVersion: 'bench' },
  );
  const registry = SqliteCapacityRegistry.open({ path: registryPath });
  const started = process.hrtime.bigint();
  let state;
  try {
    state = await supervise(
      {
        store: new EvidenceStore(fs, output),
        registry,
        execute: createExecutePairDeps(runtime, silentLogger),
        logger: silentLogger,
        environment: {},
        handleSignals: false,
      },
      'start',
    );
  } finally {
    registry.close();
  }
  const elapsedMs = elapsedMsSince(started);
  const summary = JSON.parse(await readFile(join(output, 'SUMMARY.json'), 'utf8'));
  const completed = summary.jobs.filter((j) => j.classification === 'completed').length;
  if (state !== 'drained' || completed !== PAIRS)
    throw new Error(`${name}: ${state}, ${completed}/${PAIRS} completed`);
  await rm(dir, { recursive: true, force: true });
  return elapsedMs;
}

/** Our pairs' network: the guarded bridge by default; the engine's own bridge or none when the variable says so. */
const GUARDED = (process.env.ROBOGUIDE_PAIRS_NETWORK ?? '') === '';

function dockerRun(network = []) {
  return new Promise((resolveRun, reject) => {
    const child = spawn(
      'docker',
      [
        'run',
        '--rm',
        ...network,
        IMAGE,
        '/opt/driver/run',
        `sleep=${SLEEP_S}`,
        'usage=1000',
        'outcome=completed',
      ],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    );
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolveRun() : reject(new Error(`docker run exited ${code}`))));
  });
}

/**
 * The engine's own ceiling: the same N pairs as bare `docker run --rm`, the first alone (as the dispatch policy
 * does), the rest `workers` at a time. What two of these cannot gain, no supervisor can.
 */
async function engineOnce(workers, network = []) {
  const started = process.hrtime.bigint();
  await dockerRun(network);
  let next = 1;
  const lane = async () => {
    while (next < PAIRS) {
      next += 1;
      await dockerRun(network);
    }
  };
  await Promise.all(Array.from({ length: workers }, lane));
  return elapsedMsSince(started);
}

try {
  const loadBefore = loadavg()[0];
  const one = [];
  const two = [];
  const twoBase = [];
  const engineOne = [];
  const engineTwo = [];
  const engineTwoGuarded = [];
  for (let run = 0; run < RUNS; run += 1) {
    if (ONE_WORKER) one.push(await batchOnce(1, run));
    // With a baseline, the two builds take turns going first (the load drifts within a run).
    if (baseline !== null && run % 2 === 1) twoBase.push(await batchOnce(2, run, baseline));
    two.push(await batchOnce(2, run));
    if (baseline !== null && run % 2 === 0) twoBase.push(await batchOnce(2, run, baseline));
    if (ONE_WORKER) engineOne.push(await engineOnce(1));
    engineTwo.push(await engineOnce(2));
    // The same containers on the network our pairs were on (the guarded bridge our batch ensured: ICC off, its
    // firewall chain): the engine's share of the difference, apart from the supervisor's.
    if (GUARDED) engineTwoGuarded.push(await engineOnce(2, ['--network', 'roboguide-pairs']));
  }
  const oneMs = ONE_WORKER ? median(one) : NaN;
  const twoMs = median(two);
  const s = (v) => (v / 1000).toFixed(1);
  console.log(
    `workers bench: ${PAIRS} pairs (sleep=${SLEEP_S} s), ${RUNS} batches each, alternating; load average ${loadBefore.toFixed(2)} -> ${loadavg()[0].toFixed(2)}`,
  );
  console.log(
    `  1 worker  : median ${s(oneMs)} s  [${one.map(s).join(' ')}]  (${(oneMs / PAIRS).toFixed(0)} ms per pair)`,
  );
  console.log(`  2 workers : median ${s(twoMs)} s  [${two.map(s).join(' ')}]`);
  if (baseline !== null)
    console.log(`  2 workers, BASELINE_DIST : median ${s(median(twoBase))} s  [${twoBase.map(s).join(' ')}]`);
  console.log(`  ratio two/one : ${(twoMs / oneMs).toFixed(2)}  (aim <= 0.6)`);
  const e1 = ONE_WORKER ? median(engineOne) : NaN;
  const e2 = median(engineTwo);
  console.log(
    `  engine alone (docker run --rm, first alone, then 1 or 2 at a time): ${s(e1)} s / ${s(e2)} s  [${engineOne.map(s).join(' ')}] / [${engineTwo.map(s).join(' ')}]`,
  );
  console.log(`  engine ratio two/one : ${(e2 / e1).toFixed(2)}`);
  // Issue 26's batch line: our two workers against the engine's own two at a time (bare `docker run --rm`, as
  // `xargs -P2` would run them; `[pairs] [runs] 0` gives its no-op pairs).
  console.log(
    `  issue 26: 2 workers / docker run --rm two at a time : ${(twoMs / e2).toFixed(2)}  (aim <= 1.15)`,
  );
  if (baseline !== null)
    console.log(
      `  issue 26, BASELINE_DIST: 2 workers / docker run --rm two at a time : ${(median(twoBase) / e2).toFixed(2)}`,
    );
  if (GUARDED) {
    const g = median(engineTwoGuarded);
    console.log(
      `  engine alone on the pairs network (--network roboguide-pairs), 2 at a time: ${s(g)} s  [${engineTwoGuarded.map(s).join(' ')}]`,
    );
    console.log(
      `  2 workers / docker run --rm two at a time on the same network : ${(twoMs / g).toFixed(2)}`,
    );
  }
} finally {
  await rm(root, { recursive: true, force: true });
}
