// Overhead of one pair lifecycle through our code (runPair: receipt, create, attach + redact, wait,
// outcome, sessions archive, remove, verify absent, result.json) against a bare `docker run --rm`
// of the same no-op driver. Same process, alternating, medians of N runs each.
// Needs the compiled output and the driver image: `npm run build`, `npx roboguide-eval images build`,
// then `node bench/lifecycle.bench.js [runs]` (default 10).
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NodeFileSystem } from '../dist/adapters/fs/node-file-system.js';
import { silentLogger } from '../dist/app/ports/logger.js';
import { runPair } from '../dist/app/run-pair.js';
import { createContainerRuntime, createExecutePairDeps } from '../dist/composition-root.js';
import { SqliteCapacityRegistry } from '../dist/adapters/registry/sqlite-capacity-registry.js';

const IMAGE = 'roboguide/pair-driver:1';
const RUNS = Number(process.argv[2] ?? 10);
const ACTIONS = ['outcome=completed'];

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

function elapsedMsSince(started) {
  return Number(process.hrtime.bigint() - started) / 1e6;
}

async function oursOnce(deps, root, index) {
  const jobId = `bench-lifecycle-${process.pid}-${index}`;
  const dir = join(root, jobId);
  const cwd = join(dir, 'cwd');
  await mkdir(cwd, { recursive: true });
  const spec = {
    job_id: jobId,
    argv: ['/opt/driver/run', ...ACTIONS],
    cwd,
    outcome_path: join(dir, 'out', 'outcome.json'),
    environment: {},
    ports: [],
    timeout_seconds: 120,
    image: IMAGE,
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
  const elapsedMs = elapsedMsSince(started);
  if (result.classification !== 'completed') {
    throw new Error(`${jobId}: expected completed, got ${result.classification} ${JSON.stringify(result.reasons)}`);
  }
  return elapsedMs;
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

// A private registry: the bench's pairs take and give back slots like any pair, without touching the host's.
const registry = SqliteCapacityRegistry.open({ path: join(mkdtempSync(join(tmpdir(), 'rg-bench-registry-')), 'registry.db') });
const deps = { ...createExecutePairDeps(createContainerRuntime(), silentLogger), fs: new NodeFileSystem(), registry };
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
