import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { isSameProcessAliveSync } from '../../src/adapters/host-identity.js';
import type { SupervisorRecord } from '../../src/core/supervisor-record.js';
import { RoboguideServer, type StartedRoboguideServer } from '../../src/testing/index.js';
import { BIN, cli } from '../support/cli.js';
import { containersLabelled, DRIVER_IMAGE, noDocker, sweep } from '../support/docker.js';
import {
  prometheusSkipReason,
  startPrometheus,
  type Sample,
  type TestPrometheus,
} from '../support/prometheus.js';
import { until } from '../support/until.js';

/**
 * Issue 45, done when: Debian's Prometheus scrapes `serve` (its --metrics-listen, bearer token) and the exporter
 * (`roboguide-eval metrics`) while real batches run on the real engine; then its HTTP API must say what `e1-batch
 * status` says (pairs by classification), that every slot came back (0 held at the end, at least 1 during), and that a
 * SIGKILLed supervisor is down while its pair is claimed (the first alert rule's expression). Before the issue
 * neither `/metrics` nor the `metrics` command existed: every target is down and every query empty.
 */
const skip = noDocker ? 'no Docker engine' : prometheusSkipReason();
const RUN = randomBytes(4).toString('hex');
let work: string;
let server: StartedRoboguideServer | null = null;
let exporter: ChildProcess | null = null;
let prometheus: TestPrometheus | null = null;
const batchIds: string[] = [];

/** A long-running CLI process and its first stdout line (JSON). */
async function startCli(
  args: readonly string[],
): Promise<{ child: ChildProcess; line: Record<string, unknown> }> {
  const child = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', BIN, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stderr.setEncoding('utf8').on('data', (c: string) => (err += c));
  const line = await new Promise<string>((resolve, reject) => {
    child.stdout.setEncoding('utf8').on('data', (c: string) => {
      out += c;
      if (out.includes('\n')) resolve(out.slice(0, out.indexOf('\n')));
    });
    child.once('exit', (code) => reject(new Error(`${args[0]} exited ${code}: ${err}`)));
  });
  return { child, line: JSON.parse(line) as Record<string, unknown> };
}

async function status(
  output: string,
): Promise<{ state: string; counts: Record<string, number>; batch_id: string }> {
  const r = await cli(['e1-batch', 'status', '--output', output, '--json']);
  return JSON.parse(r.stdout) as { state: string; counts: Record<string, number>; batch_id: string };
}

async function startBatch(name: string, jobs: readonly { id: string; argv: string[] }[]): Promise<string> {
  const cwd = join(work, `cwd-${name}`);
  await mkdir(cwd, { recursive: true });
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    image: DRIVER_IMAGE,
    stop_budget_seconds: 3,
    capacity: { max_workers: 1 },
    jobs: jobs.map((j) => ({
      job_id: j.id,
      argv: ['/opt/driver/run', ...j.argv],
      cwd,
      outcome_path: join(work, `out-${name}`, `${j.id}.json`),
      timeout_seconds: 600,
    })),
  };
  const path = join(work, `${name}.json`);
  await writeFile(path, JSON.stringify(manifest));
  const output = join(work, 'batches', name);
  const started = await cli([
    'e1-batch',
    'start',
    '--manifest',
    path,
    '--output',
    output,
    '--registry',
    server!.registryPath,
    '--json',
  ]);
  expect(started.code, started.stderr).toBe(0);
  batchIds.push((await status(output)).batch_id);
  return output;
}

const sumOf = (samples: Sample[]): number => samples.reduce((s, x) => s + x.value, 0);

describe.skipIf(skip !== null)(
  'metrics: Prometheus scrapes serve and the exporter during real batches',
  () => {
    afterAll(async () => {
      await prometheus?.stop();
      exporter?.kill('SIGTERM');
      for (const name of ['mixed', 'killed']) {
        const sup = await readFile(join(work, 'batches', name, 'supervisor.json'), 'utf8').catch(() => null);
        // Only the same live process (pid, start time, boot id): never a pid reused by someone else.
        const record = sup === null ? null : (JSON.parse(sup) as SupervisorRecord);
        if (record !== null && isSameProcessAliveSync(record)) process.kill(record.pid, 'SIGKILL');
      }
      for (const id of batchIds) await sweep({ 'roboguide.batch': id });
      if (server !== null) {
        await server.kill('SIGTERM');
        await server.release();
      }
      await rm(work, { recursive: true, force: true });
    });

    it('counts pairs as status does, gives every slot back, and shows a SIGKILLed supervisor as down', async () => {
      work = await mkdtemp(join(tmpdir(), `rg-metrics-${RUN}-`));
      await mkdir(join(work, 'batches'));
      const tokenFile = join(work, 'token');
      await writeFile(tokenFile, randomBytes(24).toString('hex'), { mode: 0o600 });
      server = await new RoboguideServer({
        extraArgs: ['--metrics-listen', '127.0.0.1:0', '--token-file', tokenFile],
      }).start();
      const servePort = server.started.metrics_port;
      expect(typeof servePort).toBe('number');
      const started = await startCli([
        'metrics',
        '--listen',
        '127.0.0.1:0',
        '--batches',
        join(work, 'batches'),
        '--registry',
        server.registryPath,
      ]);
      exporter = started.child;
      prometheus = await startPrometheus([
        { job: 'serve', port: servePort!, tokenFile },
        { job: 'exporter', port: started.line['port'] as number },
      ]);
      const prom = prometheus;
      await prom.waitFor('up == 1', (s) => s.length === 2);

      // serve: a session, one exec, its verified deletion.
      const created = await server.client.call<{ session_id: string }>('POST', '/v1/sessions', {
        body: { image: DRIVER_IMAGE, labels: { 'it.metrics': RUN } },
      });
      const sessionId = created.body.session_id;
      await prom.waitFor('roboguide_serve_sessions_live{job="serve"} == 1');
      const ran = await server.client.call<{ return_code: number }>(
        'POST',
        `/v1/sessions/${sessionId}/exec`,
        {
          body: { argv: ['echo', 'hello'] },
        },
      );
      expect(ran.body.return_code).toBe(0);
      await server.client.call('DELETE', `/v1/sessions/${sessionId}`);

      // A batch with mixed outcomes, one pair at a time, drained.
      const mixed = await startBatch('mixed', [
        { id: 'm1', argv: ['outcome=completed'] },
        { id: 'm2', argv: ['stdout_bytes=4096', 'outcome=infra'] },
        { id: 'm3', argv: ['sleep=2', 'outcome=completed'] },
        { id: 'm4', argv: ['outcome=invalid_json'] },
        { id: 'm5', argv: ['outcome=fatal'] },
      ]);
      const mixedId = batchIds[0]!;
      const drained = await until(
        async () => {
          const s = await status(mixed);
          return s.state === 'drained' ? s : undefined;
        },
        'the mixed batch drains',
        { timeoutMs: 180_000, intervalMs: 1000 },
      );
      const finished = await prom.waitFor(
        `roboguide_pairs_finished_total{batch="${mixedId}"}`,
        (s) => sumOf(s) === 5,
      );
      for (const classification of [
        'completed',
        'infrastructure_failure',
        'fatal',
        'provider_stop',
        'harness_failure',
      ]) {
        const value = finished.find((s) => s.metric['classification'] === classification)?.value;
        expect(value, classification).toBe(drained.counts[classification]);
      }
      expect(drained.counts['completed']).toBe(2);
      expect(drained.counts['infrastructure_failure']).toBe(2);
      expect(drained.counts['fatal']).toBe(1);
      // Every pair's phases from its result.json; the reasons from the journal; nothing left unverified.
      const phases = await prom.query(`roboguide_pair_phase_duration_seconds_count{batch="${mixedId}"}`);
      expect(phases.map((s) => [s.metric['phase'], s.value]).sort()).toEqual(
        ['collect', 'create', 'drain', 'remove', 'run'].map((p) => [p, 5]),
      );
      const reasons = await prom.query(`roboguide_pair_reasons_total{batch="${mixedId}"}`);
      expect(reasons.find((s) => s.metric['reason'] === 'outcome_unparseable')?.value).toBe(1);
      expect(reasons.find((s) => s.metric['reason'] === 'fatal_failure_flag')?.value).toBe(1);
      expect((await prom.query(`roboguide_batch_state{batch="${mixedId}",state="drained"}`))[0]?.value).toBe(
        1,
      );
      expect((await prom.query(`roboguide_containers_unverified{batch="${mixedId}"}`))[0]?.value).toBe(0);
      const logBytes = await prom.query(`roboguide_pair_log_bytes_total{batch="${mixedId}",stream="stdout"}`);
      expect(logBytes[0]?.value).toBeGreaterThanOrEqual(4096);

      // A batch whose supervisor is SIGKILLed while its pair runs: down, with a claimed pair (the first alert's expression).
      const killed = await startBatch('killed', [{ id: 'k1', argv: ['hang'] }]);
      const killedId = batchIds[1]!;
      await prom.waitFor(`roboguide_supervisor_up{batch="${killedId}"} == 1`);
      await prom.waitFor(`roboguide_batch_pairs{batch="${killedId}",state="running"} == 1`);
      const supervisor = JSON.parse(await readFile(join(killed, 'supervisor.json'), 'utf8')) as {
        pid: number;
      };
      process.kill(supervisor.pid, 'SIGKILL');
      await prom.waitFor(`roboguide_supervisor_up{batch="${killedId}"} == 0`);
      // The first alert rule's own expression, as docs/metrics-alerts.yml holds it.
      const rules = await readFile(join(import.meta.dirname, '../../docs/metrics-alerts.yml'), 'utf8');
      const expr = /alert: RoboguideSupervisorGoneWithClaimedPairs\n\s+expr: (.+)\n/.exec(rules)?.[1];
      expect(expr).toBeDefined();
      const alert = await prom.waitFor(expr!);
      expect(alert.map((s) => s.metric['batch'])).toEqual([killedId]);
      expect((await prom.query(`roboguide_batch_state{batch="${killedId}",state="paused"}`))[0]?.value).toBe(
        1,
      );
      // Its slot is still held meanwhile (the pair's container runs on).
      expect(sumOf(await prom.query('roboguide_slots_held'))).toBe(1);

      // The operator's way out: resume (reattach), then stop --terminate; the slot comes back.
      expect((await cli(['e1-batch', 'resume', '--output', killed, '--json'])).code).toBe(0);
      await prom.waitFor(`roboguide_supervisor_up{batch="${killedId}"} == 1`);
      expect((await cli(['e1-batch', 'stop', '--output', killed, '--terminate', '--json'])).code).toBe(0);
      await until(
        async () => ((await status(killed)).state === 'drained' ? true : undefined),
        'the killed batch ends after resume and stop --terminate',
        { timeoutMs: 120_000, intervalMs: 1000 },
      );
      const node = hostname();
      await prom.waitFor(`roboguide_slots_held{node="${node}"} == 0`, (s) => s.length === 1);
      expect(sumOf(await prom.query('roboguide_slots_held'))).toBe(0);
      const peak = await prom.query(`max_over_time(roboguide_slots_held{node="${node}"}[10m])`);
      expect(peak[0]?.value).toBeGreaterThanOrEqual(1);

      // serve's side: the exec counted by route and code, its latency, the session gone, its registry calls timed.
      const execs = await prom.waitFor(
        'roboguide_serve_http_requests_total{route="/v1/sessions/{id}/exec",method="POST",code="200"}',
      );
      expect(sumOf(execs)).toBe(1);
      expect(sumOf(await prom.query('roboguide_serve_exec_duration_seconds_count'))).toBe(1);
      expect(sumOf(await prom.query('roboguide_serve_sessions_live'))).toBe(0);
      const admits = await prom.query(
        'roboguide_registry_call_duration_seconds_count{job="serve",operation="admit",outcome="ok"}',
      );
      expect(sumOf(admits)).toBeGreaterThanOrEqual(1);
      expect(await containersLabelled({ 'it.metrics': RUN })).toEqual([]);
    });
  },
);
