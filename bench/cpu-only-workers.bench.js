// CPU-only batches in parallel (issue 40 item 5): the makespan of a mixed batch that declares no GPUs (no job gpus or
// gpu_mib, no capacity GPU field) through the real batch supervisor (`supervise`, in process, as `e1-batch start
// --foreground` runs it), `capacity.max_workers` 2 against 1, side by side: alternating runs, medians. Before issue
// 40 such a manifest with max_workers 2 was refused; with made-up GPU numbers it ran serially.
// The batch: N pairs in a repeating pattern of six — pass, fail (the agent reports an infrastructure failure),
// pass, pass, crash (exit 3 without an outcome), pass — each sleeping S seconds first (two passes between failures,
// so the infrastructure streak never pauses it). No network (`network: "none"`), a private registry whose host
// limit is 2.
// Needs the compiled output and the driver image: `npm run build`, `bin/roboguide-eval images build`, then
// `node_modules/.bin/node bench/cpu-only-workers.bench.js [pairs] [runs] [sleepSeconds]` (defaults 30, 3, 1).
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { NodeFileSystem } from '../dist/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../dist/adapters/registry/sqlite-capacity-registry.js';
import { EvidenceStore } from '../dist/app/evidence/evidence-store.js';
import { prepareBatch } from '../dist/app/batch/start-batch.js';
import { supervise } from '../dist/app/batch/supervisor.js';
import { systemClock } from '../dist/adapters/system-clock.js';
import { silentLogger } from '../dist/app/ports/logger.js';
import {
  createContainerRuntime,
  createExecutePairDeps,
  gatherBatchHostFacts,
  hostIdentity,
} from '../dist/composition-root.js';
import { elapsedMsSince, IMAGE, median } from './support.js';

const PAIRS = Number(process.argv[2] ?? 30);
const RUNS = Number(process.argv[3] ?? 3);
const SLEEP_S = Number(process.argv[4] ?? 1);
const PATTERN = [
  ['pass', ['outcome=completed']],
  ['fail', ['outcome=infra']],
  ['pass', ['outcome=completed']],
  ['pass', ['outcome=completed']],
  ['crash', ['exit=3']],
  ['pass', ['outcome=completed']],
];

const root = await mkdtemp(join(tmpdir(), 'cpu-only-bench-'));
const registryPath = join(root, 'registry.db');
const setup = SqliteCapacityRegistry.open({ path: registryPath });
setup.setLimits({ maxReservations: 2, gpuMib: null });
setup.close();

/** One whole batch with `workers` workers; its makespan (prepare excluded) in ms and its classifications. */
async function batchOnce(workers, index) {
  const runtime = createContainerRuntime();
  const name = `w${workers}-${index}`;
  const dir = join(root, name);
  const jobs = Array.from({ length: PAIRS }, (_, i) => {
    const [kind, actions] = PATTERN[i % PATTERN.length];
    return {
      job_id: `${kind}-${String(i).padStart(3, '0')}`,
      argv: ['/opt/driver/run', `sleep=${SLEEP_S}`, ...actions],
      cwd: join(dir, 'cwd'),
      outcome_path: join(dir, 'out', `p${i}.json`),
      timeout_seconds: 120,
      network: 'none',
    };
  });
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    image: IMAGE,
    jobs,
    capacity: { max_workers: workers },
    stop_budget_seconds: 5,
  };
  const manifestPath = join(root, `${name}.json`);
  await writeFile(manifestPath, JSON.stringify(manifest));
  const output = join(dir, 'batch');
  const fs = new NodeFileSystem();
  await prepareBatch(
    // The host facts `e1-batch start` records: CPU-only admission shares the host's memory and CPUs.
    { fs, runtime, clock: systemClock, host: hostIdentity, hostFacts: gatherBatchHostFacts },
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
  const status = JSON.parse(await readFile(join(output, 'status.json'), 'utf8'));
  const tally = {};
  for (const j of summary.jobs) tally[j.classification] = (tally[j.classification] ?? 0) + 1;
  if (state !== 'drained') throw new Error(`${name}: ${state} ${JSON.stringify(tally)}`);
  await rm(dir, { recursive: true, force: true });
  return { elapsedMs, tally, note: status.gpu_note };
}

try {
  const loadBefore = loadavg()[0];
  const one = [];
  const two = [];
  let seen = null;
  for (let run = 0; run < RUNS; run += 1) {
    // The two settings take turns going first (the load of a shared machine drifts within a run).
    const order = run % 2 === 0 ? [1, 2] : [2, 1];
    for (const workers of order) {
      const r = await batchOnce(workers, run);
      (workers === 1 ? one : two).push(r.elapsedMs);
      if (workers === 2) seen = r;
    }
  }
  const s = (v) => (v / 1000).toFixed(1);
  console.log(
    `cpu-only workers bench: ${PAIRS} pairs (sleep=${SLEEP_S} s; ${JSON.stringify(seen.tally)}), ${RUNS} batches each, alternating; load average ${loadBefore.toFixed(2)} -> ${loadavg()[0].toFixed(2)}`,
  );
  console.log(`  status with 2: ${seen.note}`);
  console.log(`  max_workers 1 : median ${s(median(one))} s  [${one.map(s).join(' ')}]`);
  console.log(`  max_workers 2 : median ${s(median(two))} s  [${two.map(s).join(' ')}]`);
  console.log(`  ratio two/one : ${(median(two) / median(one)).toFixed(2)}`);
} finally {
  await rm(root, { recursive: true, force: true });
}
