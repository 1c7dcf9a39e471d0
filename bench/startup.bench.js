// Start-up of the CLI as a user runs it, whole processes, wall time from spawn to exit (or to the engine's
// first request), medians of N runs each, the variants of one figure alternating in the same run:
//   --version            the launcher (bin/roboguide-eval) vs `node bin/run.js` vs `npx roboguide-eval`, and the
//                        floor: the pinned Node doing nothing (`node -e 0`)
//   --help               the launcher, against the same floor
//   pair run, exit 2     an invalid spec (no engine call, no file written), with and without V8's compile cache
//   first engine call    `pair run` of a valid spec whose image is missing: from spawn to the first request our
//                        engine proxy (a unix socket in front of the real engine, DOCKER_HOST) receives, against
//                        `--help`
//   no-op pair           `pair run` of roboguide/pair-driver:1 `/opt/driver/run outcome=completed` via the
//                        launcher vs `docker run --rm` of the same image and command
// Imports nothing of ours. Needs the build and the driver image: `npm run build`, `bin/roboguide-eval images
// build`, then `node bench/startup.bench.js [runs]` (default 10).
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const RUNS = Number(process.argv[2] ?? 10);
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const LAUNCHER = join(ROOT, 'bin', 'roboguide-eval');
const NODE = join(ROOT, 'node_modules', 'node', 'bin', 'node');
const RUN_JS = join(ROOT, 'bin', 'run.js');
const IMAGE = 'roboguide/pair-driver:1';
const ACTIONS = ['/opt/driver/run', 'outcome=completed'];
const ENGINE_SOCKET = (process.env.DOCKER_HOST ?? 'unix:///var/run/docker.sock').replace(/^unix:\/\//, '');

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

const msSince = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

/** Runs argv to its end; resolves the wall ms. `expect`: the exit code it must end with. */
function timed(argv, { env = {}, expect = 0 } = {}) {
  const t0 = process.hrtime.bigint();
  return new Promise((resolveRun, reject) => {
    const child = spawn(argv[0], argv.slice(1), {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.on('error', reject);
    child.on('exit', (code) => {
      const ms = msSince(t0);
      if (code === expect) resolveRun(ms);
      else reject(new Error(`${argv.join(' ')}: exit ${code}, expected ${expect}\n${stderr}`));
    });
  });
}

/** A unix socket in front of the engine that notes when the first request of a process arrives. */
async function engineProxy(path) {
  let first = null;
  const server = createServer((client) => {
    client.once('data', (chunk) => {
      first ??= process.hrtime.bigint();
      const engine = connect(ENGINE_SOCKET);
      engine.write(chunk);
      client.pipe(engine).pipe(client);
      engine.on('error', () => client.destroy());
      client.on('error', () => engine.destroy());
    });
  });
  await new Promise((resolveListen) => server.listen(path, resolveListen));
  return {
    reset: () => (first = null),
    firstAt: () => first,
    close: () => new Promise((resolveClose) => server.close(resolveClose)),
  };
}

/** Wall ms from spawn to the engine's first request (the command then fails: the image is missing). */
async function firstEngineCall(proxy, proxyPath, spec, registry) {
  proxy.reset();
  const t0 = process.hrtime.bigint();
  await timed([LAUNCHER, 'pair', 'run', '--spec', spec, '--registry', registry], {
    env: { DOCKER_HOST: `unix://${proxyPath}` },
    expect: 1,
  });
  const first = proxy.firstAt();
  if (first === null) throw new Error('pair run ended without an engine call');
  return Number(first - t0) / 1e6;
}

const dir = mkdtempSync(join(tmpdir(), 'rg-startup-bench-'));
let runIndex = 0;
/** A fresh no-op pair spec (its outcome_path must not exist yet), its output directory. */
function noOpPair(image = IMAGE) {
  runIndex += 1;
  const base = join(dir, `pair-${runIndex}`);
  mkdirSync(join(base, 'cwd'), { recursive: true });
  const spec = join(base, 'spec.json');
  const job = {
    job_id: `startup-${runIndex}`,
    argv: ACTIONS,
    cwd: join(base, 'cwd'),
    outcome_path: join(base, 'out', 'outcome.json'),
    timeout_seconds: 120,
    image,
  };
  writeFileSync(spec, JSON.stringify(job));
  return { spec, output: join(base, 'evidence') };
}

/** Runs each variant once per round (alternating), `RUNS` rounds after one warm-up round; medians. */
async function compare(variants) {
  for (const v of variants) await v.run();
  const samples = variants.map(() => []);
  for (let r = 0; r < RUNS; r += 1) {
    for (const [i, v] of variants.entries()) samples[i].push(await v.run());
  }
  return variants.map((v, i) => ({ name: v.name, median: median(samples[i]), samples: samples[i] }));
}

function print(title, rows, ratios) {
  console.log(title);
  for (const row of rows)
    console.log(
      `  ${row.name.padEnd(44)}: median ${row.median.toFixed(0).padStart(5)} ms  [${row.samples.map((v) => v.toFixed(0)).join(' ')}]`,
    );
  for (const [label, a, b] of ratios)
    console.log(`  ratio ${label.padEnd(38)}: ${(rows[a].median / rows[b].median).toFixed(2)}`);
}

const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
const proxyPath = join(dir, 'engine.sock');
const proxy = await engineProxy(proxyPath);
const registry = join(dir, 'registry.db');
try {
  console.log(
    `startup bench: ${RUNS} runs each after a warm-up, alternating; load average at start ${load()}`,
  );
  const version = await compare([
    { name: 'bin/roboguide-eval --version (launcher)', run: () => timed([LAUNCHER, '--version']) },
    { name: 'node bin/run.js --version', run: () => timed([NODE, RUN_JS, '--version']) },
    { name: 'npx roboguide-eval --version', run: () => timed(['npx', 'roboguide-eval', '--version']) },
    { name: 'node -e 0 (the floor)', run: () => timed([NODE, '-e', '0']) },
  ]);
  print('--version', version, [
    ['launcher / npx', 0, 2],
    ['launcher / node bin/run.js', 0, 1],
    ['launcher / floor', 0, 3],
  ]);

  const bad = join(dir, 'invalid-spec.json');
  writeFileSync(bad, JSON.stringify({ job_id: '../x' }));
  const missing = noOpPair('roboguide/no-such-image:1').spec;
  const startup = await compare([
    { name: 'bin/roboguide-eval --help', run: () => timed([LAUNCHER, '--help']) },
    { name: 'node -e 0 (the floor)', run: () => timed([NODE, '-e', '0']) },
    {
      name: 'pair run, invalid spec (exit 2)',
      run: () => timed([LAUNCHER, 'pair', 'run', '--spec', bad], { expect: 2 }),
    },
    {
      name: 'same, NODE_DISABLE_COMPILE_CACHE=1',
      run: () =>
        timed([LAUNCHER, 'pair', 'run', '--spec', bad], {
          env: { NODE_DISABLE_COMPILE_CACHE: '1' },
          expect: 2,
        }),
    },
    {
      name: 'pair run: spawn to first engine request',
      run: () => firstEngineCall(proxy, proxyPath, missing, registry),
    },
  ]);
  print('start-up', startup, [
    ['--help / floor', 0, 1],
    ['invalid spec / --help', 2, 0],
    ['compile cache: with / without', 2, 3],
    ['first engine request / --help', 4, 0],
  ]);

  const whole = await compare([
    {
      name: 'pair run of a no-op pair (launcher)',
      run: () => {
        const { spec, output } = noOpPair();
        return timed([LAUNCHER, 'pair', 'run', '--spec', spec, '--output', output, '--registry', registry]);
      },
    },
    { name: 'docker run --rm of the same', run: () => timed(['docker', 'run', '--rm', IMAGE, ...ACTIONS]) },
  ]);
  print(`whole process: ${IMAGE} ${ACTIONS.join(' ')}`, whole, [['pair run / docker run --rm', 0, 1]]);
  console.log(`  load average at end ${load()}`);
} finally {
  await proxy.close();
  rmSync(dir, { recursive: true, force: true });
}
