// A batch measured the user's way (issue 39): `e1-batch start` (the detached supervisor) until the batch is
// `drained`, through the CLI, against `xargs -P2 docker run --rm --network roboguide-pairs` of the same containers
// with the same bind mounts (the cwd and the outcome folder) and the same environment, side by side, alternating.
// N no-op pairs of the synthetic busybox image (`docker/pair-driver`), two workers, a private registry whose host
// limit is 2. The supervisor's RSS is sampled every 200 ms from /proc while the batch runs (`BENCH_RSS=0`: not).
// `BASELINE_ROOT=<another checkout, built>` adds that checkout's CLI (e.g. main before this work), alternating.
// Needs the build and the driver image: `npm run build`, `bin/roboguide-eval images build`, then
// `node bench/cli-batch.bench.js [pairs] [runs]` (defaults 40 and 3).
// Prints the medians, the ratio ours / docker (aim <= 1.15 for 40 pairs, <= 1.10 for 1,000) and the load average.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const PAIRS = Number(process.argv[2] ?? 40);
const RUNS = Number(process.argv[3] ?? 3);
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const NODE = join(ROOT, 'node_modules', 'node', 'bin', 'node');
const IMAGE = process.env.BENCH_IMAGE ?? 'roboguide/pair-driver:1';
const NETWORK = 'roboguide-pairs';
const SAMPLE_RSS = process.env.BENCH_RSS !== '0';
const BUILDS = [{ name: 'ours', root: ROOT }];
if (process.env.BASELINE_ROOT) BUILDS.push({ name: 'baseline', root: resolve(process.env.BASELINE_ROOT) });

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};
const msSince = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function run(file, args, { env = {}, input } = {}) {
  return new Promise((resolveRun, reject) => {
    const child = spawn(file, args, {
      env: { ...process.env, ...env },
      stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    if (input !== undefined) child.stdin.end(input);
    child.on('error', reject);
    child.on('exit', (code) =>
      code === 0
        ? resolveRun(out)
        : reject(new Error(`${file} ${args.slice(0, 3).join(' ')} exited ${code}: ${err.slice(-2000)}`)),
    );
  });
}

const root = await mkdtemp(join(tmpdir(), 'rg-cli-batch-bench-'));
// The pairs' cwd and outcome folder must lie under an allowed mount root (/tmp is one).
const registryPath = join(root, 'registry.db');
{
  const { SqliteCapacityRegistry } = await import(
    join(ROOT, 'dist/adapters/registry/sqlite-capacity-registry.js')
  );
  const registry = SqliteCapacityRegistry.open({ path: registryPath });
  registry.setLimits({ maxReservations: 2, gpuMib: null });
  registry.close();
}

function jobs(dir) {
  return Array.from({ length: PAIRS }, (_, i) => ({
    job_id: `p${String(i).padStart(4, '0')}`,
    // A GPU observation lets the dispatch policy admit the second worker after the first result.
    argv: ['/opt/driver/run', 'usage=1000', 'outcome=completed'],
    cwd: join(dir, 'cwd'),
    outcome_path: join(dir, 'out', `p${String(i).padStart(4, '0')}`, 'outcome.json'),
    timeout_seconds: 120,
  }));
}

/** The supervisor's pid: the live one recorded in the batch folder, found by its command line. */
function supervisorPid(output) {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmd = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      if (cmd.includes('supervise') && cmd.includes(output)) return Number(entry);
    } catch {
      // gone meanwhile
    }
  }
  return null;
}

function rssKib(pid) {
  try {
    const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

/** One batch through the CLI of `build`: from `e1-batch start` to its SUMMARY.json and state drained. */
async function oursOnce(build, index) {
  const dir = join(root, `${build.name}-${index}`);
  await mkdir(join(dir, 'cwd'), { recursive: true });
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    image: IMAGE,
    jobs: jobs(dir),
    capacity: { max_workers: 2, gpu_total_mib: 80000, gpu_baseline_mib: 0, gpu_fraction: 0.9 },
    stop_budget_seconds: 5,
  };
  const manifestPath = join(dir, 'manifest.json');
  await writeFile(manifestPath, JSON.stringify(manifest));
  const output = join(dir, 'batch');
  const cli = [join(build.root, 'bin', 'run.js')];
  const t0 = process.hrtime.bigint();
  await run(NODE, [
    ...cli,
    'e1-batch',
    'start',
    '--manifest',
    manifestPath,
    '--output',
    output,
    '--registry',
    registryPath,
  ]);
  const rss = [];
  let pid = null;
  let nextSample = 0;
  while (!existsSync(join(output, 'SUMMARY.json'))) {
    if (SAMPLE_RSS && msSince(t0) >= nextSample) {
      pid ??= supervisorPid(output);
      const kib = pid === null ? null : rssKib(pid);
      if (kib !== null) rss.push(kib);
      nextSample += 200;
    }
    await sleep(20);
  }
  const ms = msSince(t0);
  const status = JSON.parse(await run(NODE, [...cli, 'e1-batch', 'status', '--output', output, '--json']));
  const state = status.state ?? status.batch?.state ?? JSON.stringify(status).match(/"state":"(\w+)"/)?.[1];
  const summary = JSON.parse(await readFile(join(output, 'SUMMARY.json'), 'utf8'));
  const completed = summary.jobs.filter((j) => j.classification === 'completed').length;
  if (completed !== PAIRS)
    throw new Error(`${build.name} ${index}: state ${state}, ${completed}/${PAIRS} completed`);
  // SUMMARY.json is not the supervisor's last write (report.html comes after it): the folder is removed once it
  // has exited, else the removal can meet a file it is still writing (ENOTEMPTY).
  for (let waited = 0; supervisorPid(output) !== null; waited += 50) {
    if (waited > 120_000)
      throw new Error(`${build.name} ${index}: the supervisor did not exit after SUMMARY.json`);
    await sleep(50);
  }
  await rm(dir, { recursive: true, force: true });
  return { ms, rss };
}

/** The same containers through the docker CLI, two at a time (`xargs -P2`), the same mounts and environment. */
async function dockerOnce(index) {
  const dir = join(root, `docker-${index}`);
  await mkdir(join(dir, 'cwd'), { recursive: true });
  const list = jobs(dir);
  for (const job of list) await mkdir(join(job.outcome_path, '..'), { recursive: true });
  const lines = list.map((j) => `${j.job_id} ${join(j.outcome_path, '..')} ${j.outcome_path}`).join('\n');
  const cwd = join(dir, 'cwd');
  const script =
    `xargs -P2 -L1 sh -c 'exec docker run --rm --network ${NETWORK} -v "${cwd}:${cwd}" -v "$1:$1" -w "${cwd}" ` +
    `-e ROBOGUIDE_JOB_ID="$0" -e ROBOGUIDE_OUTCOME_PATH="$2" ${IMAGE} /opt/driver/run usage=1000 outcome=completed >/dev/null'`;
  const t0 = process.hrtime.bigint();
  await run('sh', ['-c', script], { input: `${lines}\n` });
  const ms = msSince(t0);
  const written = list.filter((j) => existsSync(j.outcome_path)).length;
  if (written !== PAIRS) throw new Error(`docker ${index}: ${written}/${PAIRS} outcomes`);
  await rm(dir, { recursive: true, force: true });
  return ms;
}

try {
  const loadBefore = loadavg();
  const times = Object.fromEntries(BUILDS.map((b) => [b.name, []]));
  const rssByBuild = Object.fromEntries(BUILDS.map((b) => [b.name, []]));
  const docker = [];
  for (let r = 0; r < RUNS; r += 1) {
    // The order rotates each run (the load drifts within a run).
    const order = [...BUILDS.map((b) => ({ kind: 'ours', b })), { kind: 'docker' }];
    for (let k = 0; k < r % order.length; k += 1) order.push(order.shift());
    for (const step of order) {
      if (step.kind === 'docker') docker.push(await dockerOnce(r));
      else {
        const { ms, rss } = await oursOnce(step.b, r);
        times[step.b.name].push(ms);
        rssByBuild[step.b.name].push(rss);
      }
    }
  }
  const s = (v) => (v / 1000).toFixed(1);
  const d = median(docker);
  console.log(
    `cli batch bench: ${PAIRS} no-op pairs, 2 workers, ${RUNS} runs each, alternating; load average ${loadBefore.map((l) => l.toFixed(2)).join(' ')} -> ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  console.log(
    `  xargs -P2 docker run --rm --network ${NETWORK}: median ${s(d)} s  [${docker.map(s).join(' ')}]`,
  );
  for (const b of BUILDS) {
    const m = median(times[b.name]);
    console.log(
      `  ${b.name} e1-batch start -> drained: median ${s(m)} s  [${times[b.name].map(s).join(' ')}]  ratio ${(m / d).toFixed(2)}  (aim <= ${PAIRS >= 1000 ? '1.10' : '1.15'})`,
    );
    if (SAMPLE_RSS) {
      for (const rss of rssByBuild[b.name]) {
        if (rss.length < 4) continue;
        const q = Math.floor(rss.length / 4);
        const mib = (kib) => (kib / 1024).toFixed(0);
        console.log(
          `    supervisor RSS (MiB, ${rss.length} samples): first quarter median ${mib(median(rss.slice(0, q)))}, last quarter median ${mib(median(rss.slice(-q)))}, max ${mib(Math.max(...rss))}`,
        );
      }
    }
  }
} finally {
  await rm(root, { recursive: true, force: true });
}
