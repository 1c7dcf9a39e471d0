// The swarm executor against the local one (issue 13), on a swarm of two throwaway engines made here (root, network
// namespaces; see test/support/swarm-cluster.ts), two fake GPUs per node:
//  1. per-pair overhead: a no-op pair through runPair on the local engine and on the swarm, alternating, medians;
//  2. makespan: the same batch of PAIRS pairs (1 GPU, `sleep=SLEEP` each) with `e1-batch start --executor swarm`
//     on both nodes and pinned to one node (placement), side by side.
// Needs the compiled output and the driver image: `npm run build`, `npx roboguide-eval images build`, then
// `node bench/swarm.bench.js [runs] [pairs] [sleep]` (defaults 5 20 5). Quote it with the machine's load (`uptime`).
import { spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { registerHooks } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NodeFileSystem } from '../dist/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../dist/adapters/registry/sqlite-capacity-registry.js';
import { silentLogger } from '../dist/app/ports/logger.js';
import { createExecutePairDeps, createExecutorRuntime } from '../dist/composition-root.js';
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
const { startSwarmCluster, swarmSupportProblem } = await import('../test/support/swarm-clus.ts');

const RUNS = Number(process.argv[2] ?? 5);
const PAIRS = Number(process.argv[3] ?? 20);
const SLEEP = Number(process.argv[4] ?? 5);
const BIN = new URL('../bin/run.js', import.meta.url).pathname;

const problem = await swarmSupportProblem();
if (problem !== null) {
  console.log(`swarm bench skipped: ${problem}`);
  process.exit(0);
}

function swarmDeps(cluster, registryPath) {
  const executor = { kind: 'swarm', manager: cluster.managerUrl, node_engines: Object.fromEntries(cluster.nodes.map((n) => [n.hostname, n.url])) };
  return {
    ...createExecutePairDeps(createExecutorRuntime(executor), silentLogger),
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
  await writeFile(manifest, JSON.stringify({ schema: 'roboguide.e1.batch/v0.1', image: IMAGE, jobs, stop_budget_seconds: 5 }));
  const started = process.hrtime.bigint();
  const r = spawnSync(process.execPath, [BIN, 'e1-batch', 'start', '--manifest', manifest, '--output', join(root, name, 'batch'), '--registry', registry, '--foreground', '--json', ...cluster.flags], { encoding: 'utf8' });
  const ms = elapsedMsSince(started);
  const state = r.status === 0 ? JSON.parse(r.stdout).state : `exit ${r.status}: ${r.stderr.slice(-500)}`;
  if (state !== 'drained') throw new Error(`${name}: ${state}`);
  return ms;
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
  console.log(`swarm bench: no-op pair through runPair, ${RUNS} runs each, alternating`);
  console.log(`  local executor : median ${median(localMs).toFixed(0)} ms  [${localMs.map((v) => v.toFixed(0)).join(' ')}]`);
  console.log(`  swarm executor : median ${median(swarmMs).toFixed(0)} ms  [${swarmMs.map((v) => v.toFixed(0)).join(' ')}]`);
  console.log(`  ratio swarm/local: ${(median(swarmMs) / median(localMs)).toFixed(2)}`);

  const set = spawnSync(process.execPath, [BIN, 'capacity', '--registry', registry, '--max-reservations', '4'], { encoding: 'utf8' });
  if (set.status !== 0) throw new Error(set.stderr);
  const two = await batch(root, registry, cluster, 'two-nodes');
  const one = await batch(root, registry, cluster, 'one-node', `node.hostname==${cluster.nodes[0].hostname}`);
  console.log(`swarm bench: batch of ${PAIRS} pairs (1 GPU, sleep ${SLEEP} s each), 2 fake GPUs per node`);
  console.log(`  2 nodes: makespan ${(two / 1000).toFixed(1)} s`);
  console.log(`  1 node : makespan ${(one / 1000).toFixed(1)} s`);
  console.log(`  ratio 2 nodes / 1 node: ${(two / one).toFixed(2)} (aim <= 0.6)`);
} finally {
  await rm(root, { recursive: true, force: true });
  await cluster.stop();
}
