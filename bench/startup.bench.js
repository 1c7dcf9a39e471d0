// Start-up of the CLI as a user runs it, whole processes, wall time from spawn to exit (or to the engine's
// first request), medians of N runs each, the variants of one figure alternating in the same run:
//   --version            the launcher (bin/roboguide-eval) vs `node bin/run.js` vs `npx roboguide-eval`, and the
//                        floor: the pinned Node doing nothing (`node -e 0`)
//   --help               the launcher, against the same floor
//   pair run, exit 2     an invalid spec (no engine call, no file written), with and without V8's compile cache
//   first engine call    `pair run` of a valid spec whose image is missing: from spawn to the first request our
//                        engine proxy (a unix socket in front of the real engine, DOCKER_HOST) receives, against
//                        `--help`; and to the image's inspect, the first request past the engine's info and
//                        version
//   no-op pair           `pair run` of roboguide/pair-driver:1 `/opt/driver/run outcome=completed` via the
//                        launcher vs `docker run --rm` of the same image and command, plain and on the guarded
//                        pairs network a pair gets by default (`--network roboguide-pairs`)
// Each whole-process figure also gives the process's CPU time (user + sys, from GNU time when /usr/bin/time is
// there), which a loaded machine inflates far less than wall time. BASELINE_ROOT=<another checkout, built> adds
// that checkout's `node bin/run.js` (e.g. the commit before this work) to each figure, alternating with ours.
// Imports nothing of ours. Needs the build and the driver image: `npm run build`, `bin/roboguide-eval images
// build`, then `node bench/startup.bench.js [runs]` (default 10).
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
const GNU_TIME = existsSync('/usr/bin/time') ? '/usr/bin/time' : null;
const BASELINE = process.env.BASELINE_ROOT ? [NODE, join(process.env.BASELINE_ROOT, 'bin', 'run.js')] : null;

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

const msSince = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;
const dir = mkdtempSync(join(tmpdir(), 'rg-startup-bench-'));

let cpuIndex = 0;
/**
 * Runs argv to its end; resolves `{ wall, cpu }` in ms (cpu: user + sys of the process and its children, null
 * without GNU time; the wall time then includes GNU time's own exec, about 1 ms). `expect`: the exit code it
 * must end with.
 */
function timed(argv, { env = {}, expect = 0 } = {}) {
  cpuIndex += 1;
  const cpuFile = join(dir, `cpu-${cpuIndex}.txt`);
  const command = GNU_TIME ? [GNU_TIME, '-q', '-f', '%U %S', '-o', cpuFile, ...argv] : argv;
  const t0 = process.hrtime.bigint();
  return new Promise((resolveRun, reject) => {
    const child = spawn(command[0], command.slice(1), {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.on('error', reject);
    child.on('exit', (code) => {
      const wall = msSince(t0);
      if (code !== expect)
        return reject(new Error(`${argv.join(' ')}: exit ${code}, expected ${expect}\n${stderr}`));
      let cpu = null;
      if (GNU_TIME) {
        const [user, sys] = readFileSync(cpuFile, 'utf8').trim().split(/\s+/).slice(-2).map(Number);
        cpu = (user + sys) * 1000;
      }
      resolveRun({ wall, cpu });
    });
  });
}

/**
 * A unix socket in front of the engine that notes when the first request of a process arrives, and the first that is
 * not for the engine's `info` or `version` (the image's inspect, for `pair run`).
 */
async function engineProxy(path) {
  let first = null;
  let own = null;
  const server = createServer((client) => {
    const engine = connect(ENGINE_SOCKET);
    engine.on('error', () => client.destroy());
    client.on('error', () => engine.destroy());
    client.on('data', (chunk) => {
      const at = process.hrtime.bigint();
      for (const request of chunk.toString('latin1').matchAll(/^[A-Z]+ (\S+) HTTP\/1/gm)) {
        first ??= at;
        if (!/^(\/v[\d.]+)?\/(info|version)(\?|$)/.test(request[1])) own ??= at;
      }
    });
    client.pipe(engine).pipe(client);
  });
  await new Promise((resolveListen) => server.listen(path, resolveListen));
  return {
    reset: () => {
      first = null;
      own = null;
    },
    firstAt: () => first,
    ownAt: () => own,
    close: () => new Promise((resolveClose) => server.close(resolveClose)),
  };
}

/**
 * Wall ms from spawn to the engine's first request, or (`own`) to the first past info and version (the image's
 * inspect: the command then exits 2, the image is missing).
 */
async function firstEngineCall(cli, proxy, proxyPath, spec, registry, own = false) {
  proxy.reset();
  const t0 = process.hrtime.bigint();
  await timed([...cli, 'pair', 'run', '--spec', spec, '--registry', registry], {
    env: { DOCKER_HOST: `unix://${proxyPath}` },
    expect: 2,
  });
  const first = own ? proxy.ownAt() : proxy.firstAt();
  if (first === null) throw new Error('pair run ended without an engine call');
  return { wall: Number(first - t0) / 1e6, cpu: null };
}

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
  const present = variants.filter((v) => v !== null);
  for (const v of present) await v.run();
  const samples = present.map(() => []);
  for (let r = 0; r < RUNS; r += 1) {
    for (const [i, v] of present.entries()) samples[i].push(await v.run());
  }
  return present.map((v, i) => {
    const cpus = samples[i].map((s) => s.cpu).filter((c) => c !== null);
    return {
      name: v.name,
      median: median(samples[i].map((s) => s.wall)),
      cpu: cpus.length > 0 ? median(cpus) : null,
      samples: samples[i].map((s) => s.wall),
    };
  });
}

/** Ratios by row name (one whose row is absent, a baseline without BASELINE_ROOT, is left out). */
function print(title, rows, ratios) {
  console.log(title);
  for (const row of rows) {
    const cpu = row.cpu === null ? '' : `, cpu ${row.cpu.toFixed(0).padStart(5)} ms`;
    const runs = row.samples.map((v) => v.toFixed(0)).join(' ');
    console.log(`  ${row.name.padEnd(44)}: median ${row.median.toFixed(0).padStart(5)} ms${cpu}  [${runs}]`);
  }
  for (const [label, a, b] of ratios) {
    const x = rows.find((r) => r.name === a);
    const y = rows.find((r) => r.name === b);
    if (x === undefined || y === undefined) continue;
    const cpu = x.cpu !== null && y.cpu !== null ? `  (cpu ${(x.cpu / y.cpu).toFixed(2)})` : '';
    console.log(`  ratio ${label.padEnd(38)}: ${(x.median / y.median).toFixed(2)}${cpu}`);
  }
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
  const V = {
    launcher: 'bin/roboguide-eval --version (launcher)',
    direct: 'node bin/run.js --version',
    npx: 'npx roboguide-eval --version',
    floor: 'node -e 0 (the floor)',
    base: 'baseline: node bin/run.js --version',
  };
  const version = await compare([
    { name: V.launcher, run: () => timed([LAUNCHER, '--version']) },
    { name: V.direct, run: () => timed([NODE, RUN_JS, '--version']) },
    { name: V.npx, run: () => timed(['npx', 'roboguide-eval', '--version']) },
    { name: V.floor, run: () => timed([NODE, '-e', '0']) },
    BASELINE && { name: V.base, run: () => timed([...BASELINE, '--version']) },
  ]);
  print('--version', version, [
    ['launcher / npx', V.launcher, V.npx],
    ['launcher / node bin/run.js', V.launcher, V.direct],
    ['launcher / floor', V.launcher, V.floor],
    ['launcher / baseline', V.launcher, V.base],
  ]);

  const bad = join(dir, 'invalid-spec.json');
  writeFileSync(bad, JSON.stringify({ job_id: '../x' }));
  const missing = noOpPair('roboguide/no-such-image:1').spec;
  const S = {
    help: 'bin/roboguide-eval --help',
    floor: 'node -e 0 (the floor)',
    invalid: 'pair run, invalid spec (exit 2)',
    nocache: 'same, NODE_DISABLE_COMPILE_CACHE=1',
    baseInvalid: 'baseline: pair run, invalid spec',
    first: 'pair run: spawn to first engine request',
    baseFirst: 'baseline: spawn to first engine request',
    own: "pair run: spawn to the image's inspect",
    baseOwn: "baseline: spawn to the image's inspect",
  };
  const noCache = { NODE_DISABLE_COMPILE_CACHE: '1' };
  const startup = await compare([
    { name: S.help, run: () => timed([LAUNCHER, '--help']) },
    { name: S.floor, run: () => timed([NODE, '-e', '0']) },
    { name: S.invalid, run: () => timed([LAUNCHER, 'pair', 'run', '--spec', bad], { expect: 2 }) },
    {
      name: S.nocache,
      run: () => timed([LAUNCHER, 'pair', 'run', '--spec', bad], { env: noCache, expect: 2 }),
    },
    BASELINE && {
      name: S.baseInvalid,
      run: () => timed([...BASELINE, 'pair', 'run', '--spec', bad], { expect: 2 }),
    },
    { name: S.first, run: () => firstEngineCall([LAUNCHER], proxy, proxyPath, missing, registry) },
    BASELINE && {
      name: S.baseFirst,
      run: () => firstEngineCall(BASELINE, proxy, proxyPath, missing, registry),
    },
    { name: S.own, run: () => firstEngineCall([LAUNCHER], proxy, proxyPath, missing, registry, true) },
    BASELINE && {
      name: S.baseOwn,
      run: () => firstEngineCall(BASELINE, proxy, proxyPath, missing, registry, true),
    },
  ]);
  print('start-up', startup, [
    ['--help / floor', S.help, S.floor],
    ['invalid spec / --help', S.invalid, S.help],
    ['compile cache: with / without', S.invalid, S.nocache],
    ['invalid spec: ours / baseline', S.invalid, S.baseInvalid],
    ['first engine request / --help', S.first, S.help],
    ['first engine request: ours / baseline', S.first, S.baseFirst],
    ["image's inspect: ours / baseline", S.own, S.baseOwn],
  ]);

  const W = {
    ours: 'pair run of a no-op pair (launcher)',
    docker: 'docker run --rm of the same',
    dockerNet: 'same, --network roboguide-pairs',
    base: 'baseline: node bin/run.js pair run',
  };
  const pairWith = (cli) => () => {
    const { spec, output } = noOpPair();
    return timed([...cli, 'pair', 'run', '--spec', spec, '--output', output, '--registry', registry]);
  };
  const whole = await compare([
    { name: W.ours, run: pairWith([LAUNCHER]) },
    { name: W.docker, run: () => timed(['docker', 'run', '--rm', IMAGE, ...ACTIONS]) },
    // The network a pair is on by default (the guarded bridge our run above ensured): the engine's share of the
    // difference, its firewall chain and ICC-off bridge, apart from ours.
    {
      name: W.dockerNet,
      run: () => timed(['docker', 'run', '--rm', '--network', 'roboguide-pairs', IMAGE, ...ACTIONS]),
    },
    BASELINE && { name: W.base, run: pairWith(BASELINE) },
  ]);
  print(`whole process: ${IMAGE} ${ACTIONS.join(' ')}`, whole, [
    ['pair run / docker run --rm', W.ours, W.docker],
    ['pair run / docker run --rm on the pairs network', W.ours, W.dockerNet],
    ['pair run: ours / baseline', W.ours, W.base],
  ]);
  console.log(`  load average at end ${load()}`);
} finally {
  await proxy.close();
  rmSync(dir, { recursive: true, force: true });
}
