// `roboguide-eval serve` against the docker CLI, in one run (medians, ratios), then 50 concurrent sessions.
//  1. exec of `true` in a session through POST /v1/sessions/{id}/exec vs `docker exec C true` (same container kind);
//  2. a pair through POST /v1/pairs (polled until finished) vs `docker run --rm` of the same driver;
//  3. N concurrent sessions (create, 10 execs of `true`, delete): throughput, p50/p99 per request, the server's
//     peak RSS (VmHWM), and leaks (containers with the run's label, held registry slots) which must be 0.
// Needs `npm run build` and the driver image; run `npx node bench/serve.bench.js [runs] [sessions]` (10, 50).
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { SqliteCapacityRegistry } from '../dist/adapters/registry/sqlite-capacity-registry.js';
import { containersLabelled, startTestServer } from '../dist/testing/index.js';
import { elapsedMsSince, IMAGE, median } from './support.js';

const RUNS = Number(process.argv[2] ?? 10);
const SESSIONS = Number(process.argv[3] ?? 50);
const EXECS = 10;
const RUN = `bench-serve-${randomUUID().slice(0, 8)}`;
const run = promisify(execFile);

function percentile(values, p) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

async function timed(fn) {
  const started = process.hrtime.bigint();
  await fn();
  return elapsedMsSince(started);
}

async function ok(promise, status) {
  const res = await promise;
  if (res.status !== status)
    throw new Error(`expected ${status}, got ${res.status}: ${JSON.stringify(res.body)}`);
  return res.body;
}

const server = await startTestServer({
  maxReservations: SESSIONS + 10,
  reapIntervalSec: 3600,
  clientMode: 'raw',
});
const api = server.client;
try {
  // 1. exec of `true`
  const session = await ok(
    api.call('POST', '/v1/sessions', { body: { image: IMAGE, labels: { 'bench.run': RUN } } }),
    201,
  );
  const viaApi = () =>
    ok(api.call('POST', `/v1/sessions/${session.session_id}/exec`, { body: { argv: ['true'] } }), 200);
  const viaCli = () => run('docker', ['exec', session.container_id, 'true']);
  await viaApi();
  await viaCli();
  const execApi = [];
  const execCli = [];
  for (let i = 0; i < RUNS * 2; i++) {
    execApi.push(await timed(viaApi));
    execCli.push(await timed(viaCli));
  }
  await ok(api.call('DELETE', `/v1/sessions/${session.session_id}`), 200);
  const execRatio = median(execApi) / median(execCli);
  console.log(
    `exec true: API median ${median(execApi).toFixed(1)} ms, docker exec median ${median(execCli).toFixed(1)} ms, ratio ${execRatio.toFixed(2)} (${RUNS * 2} runs each)`,
  );

  // 2. a pair
  const pairApi = [];
  const pairCli = [];
  for (let i = 0; i <= RUNS; i++) {
    const dir = join(server.workDir, 'pairs', String(i));
    await mkdir(join(dir, 'cwd'), { recursive: true });
    const spec = {
      job_id: `${RUN}-pair-${i}`,
      argv: ['/opt/driver/run', 'outcome=completed'],
      cwd: join(dir, 'cwd'),
      outcome_path: join(dir, 'out', 'outcome.json'),
      timeout_seconds: 120,
      image: IMAGE,
    };
    const ours = await timed(async () => {
      const { pair_id } = await ok(api.call('POST', '/v1/pairs', { body: spec }), 202);
      for (;;) {
        const status = await ok(api.call('GET', `/v1/pairs/${pair_id}`), 200);
        if (status.state !== 'running') {
          if (status.result?.classification !== 'completed')
            throw new Error(`pair ${pair_id}: ${JSON.stringify(status)}`);
          break;
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    });
    const base = await timed(() =>
      run('docker', ['run', '--rm', IMAGE, '/opt/driver/run', 'outcome=completed']),
    );
    if (i > 0) {
      // the first of each is a warm-up
      pairApi.push(ours);
      pairCli.push(base);
    }
  }
  const pairRatio = median(pairApi) / median(pairCli);
  console.log(
    `pair: POST /v1/pairs median ${median(pairApi).toFixed(0)} ms, docker run --rm median ${median(pairCli).toFixed(0)} ms, ratio ${pairRatio.toFixed(2)} (${RUNS} runs each)`,
  );

  // 3. concurrent sessions
  const latencies = { create: [], exec: [], delete: [] };
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: SESSIONS }, async () => {
      let s;
      latencies.create.push(
        await timed(async () => {
          s = await ok(
            api.call('POST', '/v1/sessions', { body: { image: IMAGE, labels: { 'bench.run': RUN } } }),
            201,
          );
        }),
      );
      for (let k = 0; k < EXECS; k++)
        latencies.exec.push(
          await timed(() =>
            ok(api.call('POST', `/v1/sessions/${s.session_id}/exec`, { body: { argv: ['true'] } }), 200),
          ),
        );
      latencies.delete.push(
        await timed(async () => {
          const record = await ok(api.call('DELETE', `/v1/sessions/${s.session_id}`), 200);
          if (!record.verified_absent || !record.slot_released)
            throw new Error(`unverified cleanup ${JSON.stringify(record)}`);
        }),
      );
    }),
  );
  const wallS = elapsedMsSince(started) / 1000;
  const requests = SESSIONS * (EXECS + 2);
  const status = await readFile(`/proc/${server.process.pid}/status`, 'utf8');
  const hwmKiB = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0);
  const all = [...latencies.create, ...latencies.exec, ...latencies.delete];
  const leakedContainers = await containersLabelled({ 'bench.run': RUN });
  const registry = SqliteCapacityRegistry.open({ path: server.registryPath });
  const heldSlots = (await registry.held()).length;
  registry.closeSync();
  console.log(
    `${SESSIONS} concurrent sessions x (create, ${EXECS} execs, delete): ${requests} requests in ${wallS.toFixed(1)} s = ${(requests / wallS).toFixed(1)} req/s, ${(SESSIONS / wallS).toFixed(2)} sessions/s`,
  );
  for (const [name, values] of Object.entries({ ...latencies, all })) {
    console.log(
      `  ${name.padEnd(6)} p50 ${percentile(values, 50).toFixed(0)} ms, p99 ${percentile(values, 99).toFixed(0)} ms (${values.length})`,
    );
  }
  console.log(
    `  server peak RSS (VmHWM) ${(hwmKiB / 1024).toFixed(1)} MiB; leaked containers ${leakedContainers.length}, held slots ${heldSlots}`,
  );
  if (leakedContainers.length > 0 || heldSlots > 0) process.exitCode = 1;
} finally {
  await server.dispose();
}
