// The swarm executor against the local one (issue 13), on a swarm of two throwaway engines made here (root, network
// namespaces; see test/support/swarm-cluster.ts), two fake GPUs per node:
//  1. per-pair overhead: a no-op pair through runPair on the local engine and on the swarm, alternating, medians;
//  2. makespan: the same batch of PAIRS pairs (1 GPU, `sleep=SLEEP` each) with `e1-batch start --executor swarm`
//     on both nodes and pinned to one node (placement), side by side.
//     Both batches run `batches` times, alternating, and the medians are compared. Per batch, where the time goes:
//     the medians, over its pairs, of claim → service created, created → started (Swarm's scheduling and the task's
//     start), the run itself, its end → `pair_finished` (logs, outcome read back, removal verified, result), then
//     → `reconciled`; and the dispatch gap: a slot freed (`reconciled`) → the next pair's `claimed`.
// Needs the compiled output and the driver image: `npm run build`, `npx roboguide-eval images build`, then
// `node bench/swarm.bench.js [runs] [pairs] [sleep] [batches]` (defaults 5 20 5 3). It prints the load average
// (`uptime`) before and after: quote the figures with it.
import { spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { registerHooks } from 'node:module';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { NodeFileSystem } from '../dist/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../dist/adapters/registry/sqlite-capacity-registry.js';
import { silentLogger } from '../dist/app/ports/logger.js';
import { createExecutePairDeps, createExecutor } from '../dist/composition-root.js';
import { elapsedMsSince, IMAGE, median, pairRunDeps, timedPair } from './support.js';

// The test harness is TypeScript (Node 24 strips the types): its `.js` imports resolve to the `.ts` next to them, and
// the product's to dist/.
registerHooks({
  resolve(specifier, context, nextResolve) {
    try {
      return nextResolve(specifier, context);
    } catch (err) {
      if (!specifier.endsWith('.js') || !specifier.startsWith('.')) throw err;
      const url = new URL(specifier, context.parentURL);
      if (url.pathname.includes('/src/')) return nextResolve(url.href.replace('/src/', '/dist/'), context);
      return nextResolve(url.href.replace(/\.js$/, '.ts'), context);
    }
  },
});
const { startSwarmCluster, swarmSupportProblem } = await import('../test/support/swarm-cluster.ts');

const RUNS = Number(process.argv[2] ?? 5);
const PAIRS = Number(process.argv[3] ?? 20);
const SLEEP = Number(process.argv[4] ?? 5);
const BATCHES = Number(process.argv[5] ?? 3);
const load = () =>
  loadavg()
    .map((v) => v.toFixed(1))
    .join(' ');
const BIN = new URL('../bin/run.js', import.meta.url).pathname;

const problem = await swarmSupportProblem();
if (problem !== null) {
  console.log(`swarm bench skipped: ${problem}`);
  process.exit(0);
}

function swarmDeps(cluster, registryPath) {
  const executor = {
    kind: 'swarm',
    manager: cluster.managerUrl,
    node_engines: Object.fromEntries(cluster.nodes.map((n) => [n.hostname, n.url])),
  };
  const where = createExecutor(executor, [], silentLogger);
  return {
    ...createExecutePairDeps(where.runtime, silentLogger, where),
    fs: new NodeFileSystem(),
    registry: SqliteCapacityRegistry.open({ path: registryPath }),
  };
}

async function batch(root, registry, cluster, name, placement) {
  const jobs = Array.from({ length: PAIRS }, (_, i) => ({
    job_id: `p${i}`,
    argv: ['/opt/driver/run', `sleep=${SLEEP}`, 'outcome=completed'],
    cwd: join(root, name, 'cwd'),
    outcome_path: join(root, name, 'out', `p${i}`, 'outcome.json'),
    timeout_seconds: 600,
    gpus: 1,
    ...(placement ? { placement: [placement] } : {}),
  }));
  const manifest = join(root, `${name}.json`);
  await mkdir(join(root, name), { recursive: true });
  await writeFile(
    manifest,
    JSON.stringify({ schema: 'roboguide.e1.batch/v0.1', image: IMAGE, jobs, stop_budget_seconds: 5 }),
  );
  const started = process.hrtime.bigint();
  const r = spawnSync(
    process.execPath,
    [
      BIN,
      'e1-batch',
      'start',
      '--manifest',
      manifest,
      '--output',
      join(root, name, 'batch'),
      '--registry',
      registry,
      '--foreground',
      '--json',
      ...cluster.flags,
    ],
    { encoding: 'utf8' },
  );
  const ms = elapsedMsSince(started);
  const state = r.status === 0 ? JSON.parse(r.stdout).state : `exit ${r.status}: ${r.stderr.slice(-500)}`;
  if (state !== 'drained') throw new Error(`${name}: ${state}`);
  return {
    ms,
    phases: await phases(
      join(root, name, 'batch'),
      jobs.map((j) => j.job_id),
    ),
  };
}

/** Where a batch's time went, from its journal and results (medians over its pairs, ms). */
async function phases(output, jobIds) {
  const events = (await readFile(join(output, 'events.jsonl'), 'utf8'))
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
  const at = (type, job) => Date.parse(events.find((e) => e.type === type && e.job_id === job)?.at ?? 'x');
  const rows = await Promise.all(
    jobIds.map(async (job) => {
      const result = JSON.parse(await readFile(join(output, 'jobs', job, 'result.json'), 'utf8'));
      const claimed = at('claimed', job);
      const created = at('container_created', job);
      const started = Date.parse(result.started_at);
      const finished = Date.parse(result.finished_at);
      return {
        claimed,
        create: created - claimed,
        start: started - created,
        run: finished - started,
        teardown: at('pair_finished', job) - finished,
        reconcile: at('reconciled', job) - at('pair_finished', job),
      };
    }),
  );
  const freed = events
    .filter((e) => e.type === 'reconciled')
    .map((e) => Date.parse(e.at))
    .sort((a, b) => a - b);
  // A slot freed → the next claim after it (claims that did not wait for a slot, the first ones, have none before them).
  const gaps = rows
    .map((r) => r.claimed)
    .sort((a, b) => a - b)
    .flatMap((c) => {
      const before = freed.filter((f) => f <= c);
      return before.length === 0 ? [] : [c - before[before.length - 1]];
    });
  const med = (key) => median(rows.map((r) => r[key])).toFixed(0);
  return `create ${med('create')}, start ${med('start')}, run ${med('run')}, teardown ${med('teardown')}, reconcile ${med('reconcile')}, dispatch gap ${gaps.length > 0 ? median(gaps).toFixed(0) : '-'} ms; admission_refused ${events.filter((e) => e.type === 'admission_refused').length}`;
}

const cluster = await startSwarmCluster({ nodes: 2, gpusPerNode: 2, tag: 'bench' });
const root = await mkdtemp(join(tmpdir(), 'swarm-bench-'));
try {
  const registry = join(root, 'registry.db');
  const local = pairRunDeps();
  const swarm = swarmDeps(cluster, registry);
  await timedPair(local, root, 'warm-local', ['outcome=completed'], 120);
  await timedPair(swarm, root, 'warm-swarm', ['outcome=completed'], 120);
  const localMs = [];
  const swarmMs = [];
  for (let run = 0; run < RUNS; run += 1) {
    localMs.push((await timedPair(local, root, `local-${run}`, ['outcome=completed'], 120)).elapsedMs);
    swarmMs.push((await timedPair(swarm, root, `swarm-${run}`, ['outcome=completed'], 120)).elapsedMs);
  }
  swarm.registry.close();
  console.log(`swarm bench: no-op pair through runPair, ${RUNS} runs each, alternating; load ${load()}`);
  console.log(
    `  local executor : median ${median(localMs).toFixed(0)} ms  [${localMs.map((v) => v.toFixed(0)).join(' ')}]`,
  );
  console.log(
    `  swarm executor : median ${median(swarmMs).toFixed(0)} ms  [${swarmMs.map((v) => v.toFixed(0)).join(' ')}]`,
  );
  console.log(`  ratio swarm/local: ${(median(swarmMs) / median(localMs)).toFixed(2)}`);

  const set = spawnSync(
    process.execPath,
    [BIN, 'capacity', '--registry', registry, '--max-reservations', '2'],
    { encoding: 'utf8' },
  );
  if (set.status !== 0) throw new Error(set.stderr);
  console.log(
    `swarm bench: batch of ${PAIRS} pairs (1 GPU, sleep ${SLEEP} s each), 2 fake GPUs and 2 registry slots per node, ${BATCHES} runs each, alternating; load ${load()}`,
  );
  const twoMs = [];
  const oneMs = [];
  for (let run = 0; run < BATCHES; run += 1) {
    const two = await batch(root, registry, cluster, `two-nodes-${run}`);
    const one = await batch(
      root,
      registry,
      cluster,
      `one-node-${run}`,
      `node.hostname==${cluster.nodes[0].hostname}`,
    );
    twoMs.push(two.ms);
    oneMs.push(one.ms);
    console.log(`  run ${run}: 2 nodes ${(two.ms / 1000).toFixed(1)} s (${two.phases})`);
    console.log(`         1 node  ${(one.ms / 1000).toFixed(1)} s (${one.phases})`);
  }
  console.log(
    `  2 nodes: makespan median ${(median(twoMs) / 1000).toFixed(1)} s  [${twoMs.map((v) => (v / 1000).toFixed(1)).join(' ')}]`,
  );
  console.log(
    `  1 node : makespan median ${(median(oneMs) / 1000).toFixed(1)} s  [${oneMs.map((v) => (v / 1000).toFixed(1)).join(' ')}]`,
  );
  console.log(
    `  ratio 2 nodes / 1 node: ${(median(twoMs) / median(oneMs)).toFixed(2)} (aim <= 0.6); load after ${load()}`,
  );
} finally {
  await rm(root, { recursive: true, force: true });
  await cluster.stop();
}
