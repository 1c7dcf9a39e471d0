// Issue 26 item 5: N concurrent sessions of `roboguide-eval serve` against the docker CLI doing the same work at the
// same concurrency, in the same run. One session: create, 10 execs of `true`, delete (ours: POST /v1/sessions,
// POST …/exec, DELETE with the removal verified and the slot released; the CLI's: `docker run -d` of the same idle
// container — init, no-new-privileges, no capabilities, network none —, `docker exec C true`, `docker rm -f C` and
// `docker inspect C` answering "no such object"). The two series alternate, `rounds` of each after nothing else;
// wall time of each series, the ratio of the medians (ours / CLI), p50/p99 per request kind, the load average, and
// leaks (containers with the run's label, held registry slots), which make it exit 1.
// Needs `npm run build` and the driver image: `node bench/serve-sessions.bench.js [sessions] [rounds]` (20, 2;
// `npm run bench` runs 100 sessions, issue 39's aim <= 0.75). `BASELINE_ROOT=<another built checkout>` adds a third
// series, that build's server, in the same alternation (before/after in one run); `BENCH_SERVER_NODE_OPTIONS` is
// handed to the servers (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`); each server's event-loop delay histogram is
// printed at the end (bench/loop-delay.js).
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { SqliteCapacityRegistry } from '../dist/adapters/registry/sqlite-capacity-registry.js';
import { containersLabelled, startTestServer } from '../dist/testing/index.js';
import { elapsedMsSince, IMAGE, median } from './support.js';

const SESSIONS = Number(process.argv[2] ?? 20);
const ROUNDS = Number(process.argv[3] ?? 2);
const EXECS = 10;
const RUN = `bench-sessions-${randomUUID().slice(0, 8)}`;
const docker = promisify(execFile);
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

function percentile(values, p) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

async function timed(latencies, fn) {
  const started = process.hrtime.bigint();
  const value = await fn();
  latencies.push(elapsedMsSince(started));
  return value;
}

async function ok(promise, status) {
  const res = await promise;
  if (res.status !== status)
    throw new Error(`expected ${status}, got ${res.status}: ${JSON.stringify(res.body)}`);
  return res.body;
}

/** One session through the API. */
async function viaApi(api, latencies) {
  const s = await timed(latencies.create, () =>
    ok(api.call('POST', '/v1/sessions', { body: { image: IMAGE, labels: { 'bench.run': RUN } } }), 201),
  );
  for (let k = 0; k < EXECS; k++)
    await timed(latencies.exec, () =>
      ok(api.call('POST', `/v1/sessions/${s.session_id}/exec`, { body: { argv: ['true'] } }), 200),
    );
  await timed(latencies.delete, async () => {
    const record = await ok(api.call('DELETE', `/v1/sessions/${s.session_id}`), 200);
    if (!record.verified_absent || !record.slot_released)
      throw new Error(`unverified cleanup ${JSON.stringify(record)}`);
  });
}

/** The same session's work through the docker CLI. */
async function viaCli(latencies) {
  const { stdout } = await timed(latencies.create, () =>
    docker('docker', [
      'run',
      '-d',
      '--init',
      '--security-opt',
      'no-new-privileges',
      '--cap-drop',
      'ALL',
      '--network',
      'none',
      '--label',
      `bench.run=${RUN}`,
      '--entrypoint',
      'sleep',
      IMAGE,
      '2147483647',
    ]),
  );
  const id = stdout.trim();
  for (let k = 0; k < EXECS; k++) await timed(latencies.exec, () => docker('docker', ['exec', id, 'true']));
  await timed(latencies.delete, async () => {
    await docker('docker', ['rm', '-f', id]);
    const gone = await docker('docker', ['inspect', id]).then(
      () => false,
      (err) => /no such/i.test(String(err.stderr)),
    );
    if (!gone) throw new Error(`container ${id} still there after docker rm -f`);
  });
}

async function series(one) {
  const latencies = { create: [], exec: [], delete: [] };
  const started = process.hrtime.bigint();
  await Promise.all(Array.from({ length: SESSIONS }, () => one(latencies)));
  return { wallMs: elapsedMsSince(started), latencies };
}

const delayDir = await mkdtemp(join(tmpdir(), 'rg-bench-loop-'));
const LOOP_DELAY = fileURLToPath(new URL('loop-delay.js', import.meta.url));
const serverOptions = (name) => ({
  maxReservations: SESSIONS + 10,
  reapIntervalSec: 3600,
  clientMode: 'raw',
  // Every session may have its exec running at once, as the docker CLI's side does (the default limit is 64: with
  // 100 sessions the server would answer 429, which is its limit working, not its speed).
  extraArgs: ['--max-execs', String(Math.max(64, SESSIONS))],
  // Each server's event-loop delay histogram (bench/loop-delay.js); these variables are not the sessions' to use.
  allowEnv: [],
  env: {
    NODE_OPTIONS: `--import=${LOOP_DELAY} ${process.env.BENCH_SERVER_NODE_OPTIONS ?? ''}`,
    LOOP_DELAY_OUT: join(delayDir, `${name}.json`),
  },
});
const server = await startTestServer(serverOptions('ours'));
const baseline = process.env.BASELINE_ROOT
  ? await (
      await import(`${process.env.BASELINE_ROOT}/dist/testing/index.js`)
    ).startTestServer(serverOptions('base'))
  : null;
try {
  console.log(
    `serve sessions bench: ${SESSIONS} concurrent sessions x (create, ${EXECS} execs, delete), ${ROUNDS} rounds alternating; load average at start ${load()}`,
  );
  const ours = [];
  const cli = [];
  const base = [];
  const kinds = baseline === null ? ['ours', 'cli'] : ['ours', 'base', 'cli'];
  for (let r = 0; r < ROUNDS; r++) {
    // Rotate which goes first, so none always meets the engine still busy with another's removals.
    const order = kinds.map((_, k) => kinds[(k + r) % kinds.length]);
    for (const which of order) {
      const result =
        which === 'ours'
          ? await series((l) => viaApi(server.client, l))
          : which === 'base'
            ? await series((l) => viaApi(baseline.client, l))
            : await series((l) => viaCli(l));
      ({ ours, base, cli })[which].push(result);
      const label = { ours: 'serve API ', base: 'baseline  ', cli: 'docker CLI' }[which];
      console.log(`  round ${r + 1} ${label}: ${(result.wallMs / 1000).toFixed(1)} s (load ${load()})`);
    }
  }
  for (const [name, results] of [
    ['serve API', ours],
    ...(baseline === null ? [] : [['baseline', base]]),
    ['docker CLI', cli],
  ]) {
    const all = { create: [], exec: [], delete: [] };
    for (const { latencies } of results)
      for (const kind of Object.keys(all)) all[kind].push(...latencies[kind]);
    const kinds = Object.entries(all)
      .map(([k, v]) => `${k} p50/p99 ${percentile(v, 50).toFixed(0)}/${percentile(v, 99).toFixed(0)} ms`)
      .join(', ');
    console.log(
      `  ${name.padEnd(10)}: median ${(median(results.map((x) => x.wallMs)) / 1000).toFixed(1)} s; ${kinds}`,
    );
  }
  const ratio = median(ours.map((x) => x.wallMs)) / median(cli.map((x) => x.wallMs));
  console.log(
    `${SESSIONS} concurrent sessions, serve / docker CLI ${ratio.toFixed(2)} (aim: issue 26 <= 0.6 at 20, issue 39 <= 0.75 at 100); load average at end ${load()}`,
  );
  if (baseline !== null)
    console.log(
      `  baseline (${process.env.BASELINE_ROOT}) / docker CLI ${(median(base.map((x) => x.wallMs)) / median(cli.map((x) => x.wallMs))).toFixed(2)}; this build / baseline ${(median(ours.map((x) => x.wallMs)) / median(base.map((x) => x.wallMs))).toFixed(2)}`,
    );
  const leaked = await containersLabelled({ 'bench.run': RUN });
  let held = 0;
  for (const s of baseline === null ? [server] : [server, baseline]) {
    const registry = SqliteCapacityRegistry.open({ path: s.registryPath });
    held += (await registry.held()).length;
    registry.closeSync();
  }
  console.log(`  leaked containers ${leaked.length}, held slots ${held}`);
  if (leaked.length > 0 || held > 0) process.exitCode = 1;
} finally {
  await server.dispose();
  await baseline?.dispose();
  for (const name of baseline === null ? ['ours'] : ['ours', 'base']) {
    const delay = await readFile(join(delayDir, `${name}.json`), 'utf8').then(JSON.parse, () => null);
    if (delay !== null)
      console.log(
        `  ${name === 'ours' ? 'this build' : 'baseline'} event-loop delay over its life: p50 ${delay.p50} ms, p99 ${delay.p99} ms, max ${delay.max} ms`,
      );
  }
  await rm(delayDir, { recursive: true, force: true });
}
