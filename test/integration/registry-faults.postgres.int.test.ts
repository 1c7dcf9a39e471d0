/**
 * A PostgreSQL registry that freezes (SIGSTOP of the postmaster and its children) or stops, under a detached batch
 * run through the CLI (issue 27): at admission, during a pair (its reconciliation), with a `stop` while frozen. Each
 * case: the batch pauses `registry_unavailable` within the registry deadline (ROBOGUIDE_REGISTRY_DEADLINE_MS, 2 s
 * here), the cause is in the journal, status and supervisor.log, the supervisor exits, and once the server is back
 * one `resume` drains the batch: each pair run once, no reservation held, no container left.
 *
 * The last case partitions the registry from the supervisor in a network namespace of the test's own (iptables
 * there drops the packets to the server's port). Faults last FAULT_MS (5 s); ROBOGUIDE_TEST_LONG_REGISTRY_FAULTS=1
 * holds them 90 s (not in CI: slow). Skipped where PostgreSQL or Docker cannot run, unless REQUIRE_POSTGRES=1.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePostgresUrl } from '../../src/adapters/registry/default-path.js';
import { PostgresCapacityRegistry } from '../../src/adapters/registry/postgres-capacity-registry.js';
import { containersLabelled, DRIVER_IMAGE, noDocker, sweep } from '../support/docker.js';
import { postgresSkipReason, startPostgres, type TestPostgres } from '../support/postgres.js';
import { cli as runCli, type CliOutput } from '../support/cli.js';

const skip = postgresSkipReason() ?? (noDocker ? 'no Docker engine' : null);
const DEADLINE_MS = 2_000;
const FAULT_MS = process.env['ROBOGUIDE_TEST_LONG_REGISTRY_FAULTS'] === '1' ? 90_000 : 5_000;
/** Scheduling slack on a loaded 2-core machine (the CLI itself takes about a second to start). */
const SLACK_MS = 2_500;
const STOP_BUDGET_SEC = 5;

interface JournalLine {
  readonly type: string;
  readonly at: string;
  readonly job_id?: string;
  readonly reasons?: string[];
  readonly cause?: { code: string; message: string };
  readonly kind?: string;
  readonly reason?: string | null;
}

let server: TestPostgres | null = null;
let work = '';
const batches: string[] = [];
/** The partition case: the CLI (and the supervisor it launches) run in this network namespace, with this password. */
let inNamespace: { readonly netns: string; readonly password: string } | null = null;

/** The CLI with the short registry deadline; inside the namespace (with its password) during the partition case. */
function cli(args: readonly string[]): Promise<CliOutput> {
  return runCli(args, {
    env: {
      ROBOGUIDE_REGISTRY_DEADLINE_MS: String(DEADLINE_MS),
      ...(inNamespace !== null ? { PGPASSWORD: inNamespace.password } : {}),
    },
    ...(inNamespace !== null ? { prefix: ['nsenter', `--net=/run/netns/${inNamespace.netns}`] } : {}),
  });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One job per entry of `sleeps` (seconds the driver sleeps). */
async function manifest(name: string, sleeps: readonly number[]): Promise<string> {
  const dir = join(work, name);
  const path = join(work, `${name}.json`);
  await writeFile(
    path,
    JSON.stringify({
      schema: 'roboguide.e1.batch/v0.1',
      image: DRIVER_IMAGE,
      stop_budget_seconds: STOP_BUDGET_SEC,
      jobs: sleeps.map((sleepSeconds, i) => ({
        job_id: `${name}-${i}`,
        argv: ['/opt/driver/run', `sleep=${sleepSeconds}`, 'outcome=completed'],
        cwd: join(dir, 'cwd'),
        outcome_path: join(dir, 'out', `${name}-${i}.json`),
        timeout_seconds: 120,
      })),
    }),
  );
  return path;
}

interface StatusView {
  state: string;
  counts: Record<string, number>;
  pause_reasons: string[];
  pause_causes?: { reason: string; code: string; message: string; job_id: string | null }[];
  running: unknown[];
}

async function statusOf(output: string): Promise<StatusView> {
  const status = await cli(['e1-batch', 'status', '--output', output, '--json']);
  expect(status.code, status.stderr).toBe(0);
  return JSON.parse(status.stdout) as StatusView;
}

async function journal(output: string): Promise<JournalLine[]> {
  const text = await readFile(join(output, 'events.jsonl'), 'utf8');
  return text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as JournalLine);
}

/** Polls the journal (no CLI start-up cost) until `pred` holds; returns the first record that matched. */
async function waitForRecord(
  output: string,
  pred: (r: JournalLine) => boolean,
  timeoutMs: number,
): Promise<JournalLine | null> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const found = (await journal(output).catch(() => [])).find(pred);
    if (found !== undefined || Date.now() > end) return found ?? null;
    await sleep(100);
  }
}

async function waitForExit(pid: number, timeoutMs: number): Promise<number> {
  const t0 = Date.now();
  while (alive(pid) && Date.now() - t0 < timeoutMs) await sleep(50);
  return Date.now() - t0;
}

async function withRegistry<T>(url: string, work: (r: PostgresCapacityRegistry) => Promise<T>): Promise<T> {
  const location = parsePostgresUrl(url);
  const registry = await PostgresCapacityRegistry.open({
    connection: location.connection,
    display: location.path,
    maxConnections: 1,
  });
  try {
    return await work(registry);
  } finally {
    await registry.close();
  }
}

async function start(
  name: string,
  url: string,
  sleeps: readonly number[],
): Promise<{ output: string; batchId: string; pid: number }> {
  const output = join(work, name, 'batch');
  const started = await cli([
    'e1-batch',
    'start',
    '--manifest',
    await manifest(name, sleeps),
    '--output',
    output,
    '--registry',
    url,
    '--json',
  ]);
  expect(started.code, started.stderr).toBe(0);
  const { batch_id: batchId, supervisor_pid: pid } = JSON.parse(started.stdout) as {
    batch_id: string;
    supervisor_pid: number;
  };
  batches.push(batchId);
  return { output, batchId, pid };
}

/** The pause: registry_unavailable with its cause in the journal, status (state and causes) and supervisor.log. */
async function expectRegistryPause(output: string, paused: JournalLine): Promise<void> {
  expect(paused.reasons).toEqual(['registry_unavailable']);
  expect(paused.cause?.code).toBe('E_REGISTRY_UNAVAILABLE');
  expect(paused.cause?.message).toMatch(/deadline|could not reach/);
  const status = await statusOf(output);
  expect(status.state).toBe('paused');
  expect(status.pause_reasons).toEqual(['registry_unavailable']);
  expect(status.pause_causes?.[0]).toMatchObject({
    reason: 'registry_unavailable',
    code: 'E_REGISTRY_UNAVAILABLE',
  });
  const log = await readFile(join(output, 'supervisor.log'), 'utf8');
  const pauseLine = log.split('\n').find((l) => l.includes('"batch paused"'));
  expect(pauseLine).toContain('registry_unavailable');
  expect(pauseLine).toContain('E_REGISTRY_UNAVAILABLE');
}

/** One resume drains it: each pair claimed and finished once, nothing held, no container left. */
async function expectResumeDrains(
  output: string,
  batchId: string,
  url: string,
  jobs: number,
  registryUrl: string = url,
): Promise<void> {
  const resumed = await cli(['e1-batch', 'resume', '--output', output, '--foreground', '--json']);
  expect(resumed.code, resumed.stderr).toBe(0);
  const status = await statusOf(output);
  expect(status.state).toBe('drained');
  expect(status.counts['completed']).toBe(jobs);
  const records = await journal(output);
  const claims = records.filter((r) => r.type === 'claimed').map((r) => r.job_id);
  const finishes = records.filter((r) => r.type === 'pair_finished').map((r) => r.job_id);
  expect(claims.length).toBe(jobs);
  expect(new Set(claims).size).toBe(jobs);
  expect(finishes.length).toBe(jobs);
  expect(new Set(finishes).size).toBe(jobs);
  expect(await withRegistry(registryUrl, (r) => r.held({ batchId }))).toEqual([]);
  expect(await containersLabelled({ 'roboguide.batch': batchId })).toEqual([]);
}

if (skip !== null) {
  describe.skip(`PostgreSQL registry faults: ${skip}`, () => {
    it('needs PostgreSQL and Docker', () => undefined);
  });
} else {
  beforeAll(async () => {
    server = startPostgres();
    work = await mkdtemp(join(tmpdir(), 'rg-pgfault-'));
  });
  afterAll(async () => {
    // Always thaw (a frozen server ignores pg_ctl stop), then stop it; sweep what a failed case left.
    server?.thaw();
    server?.stop();
    for (const batchId of batches) await sweep({ 'roboguide.batch': batchId }).catch(() => 0);
    await rm(work, { recursive: true, force: true });
  });

  describe('PostgreSQL registry frozen or stopped under a batch (issue 27)', () => {
    it('frozen during a pair: its reconciliation pauses registry_unavailable within the deadline; resume drains', async () => {
      const url = await server!.createDatabase('rg_during');
      const { output, batchId, pid } = await start('during', url, [3, 1]);
      expect(await waitForRecord(output, (r) => r.type === 'container_created', 60_000)).not.toBeNull();
      server!.freeze();
      const frozenAt = Date.now();
      try {
        const paused = await waitForRecord(output, (r) => r.type === 'paused', 60_000);
        expect(paused).not.toBeNull();
        const finished = (await journal(output)).find((r) => r.type === 'pair_finished');
        expect(finished).toBeDefined();
        const afterFinish = Date.parse(paused!.at) - Date.parse(finished!.at);
        console.info(
          `frozen during a pair: paused ${afterFinish} ms after the pair finished (deadline ${DEADLINE_MS} ms)`,
        );
        expect(afterFinish).toBeLessThanOrEqual(DEADLINE_MS + SLACK_MS);
        const reconciled = (await journal(output)).find((r) => r.type === 'reconciled');
        expect(reconciled).toMatchObject({ kind: 'hold', reason: 'registry_unavailable' });
        const exitMs = await waitForExit(pid, 30_000);
        console.info(`frozen during a pair: supervisor exited ${exitMs} ms after the pause was seen`);
        expect(alive(pid)).toBe(false);
        await expectRegistryPause(output, paused!);
      } finally {
        await sleep(Math.max(0, FAULT_MS - (Date.now() - frozenAt)));
        server!.thaw();
      }
      await expectResumeDrains(output, batchId, url, 2);
    });

    it('frozen at admission (the host full, admission retrying): pauses registry_unavailable within retry + deadline; resume drains', async () => {
      const url = await server!.createDatabase('rg_admit');
      // The only slot is held by another batch: the supervisor's admission is refused and retried every 2 s.
      const blocker = await withRegistry(url, async (r) => {
        await r.setLimits({ maxReservations: 1, gpuMib: null });
        const admitted = await r.admit({
          batchId: 'blocker',
          jobId: 'x',
          claimId: 'blocker-claim',
          gpuMib: 0,
        });
        if (admitted.kind !== 'admitted') throw new Error(`blocker not admitted: ${admitted.kind}`);
        return admitted.reservationId;
      });
      const { output, batchId, pid } = await start('admit', url, [1, 1]);
      expect(await waitForRecord(output, (r) => r.type === 'admission_refused', 60_000)).not.toBeNull();
      server!.freeze();
      const frozenAt = Date.now();
      try {
        const paused = await waitForRecord(output, (r) => r.type === 'paused', 60_000);
        expect(paused).not.toBeNull();
        const pausedMs = Date.parse(paused!.at) - frozenAt;
        console.info(
          `frozen at admission: paused ${pausedMs} ms after the freeze (retry 2000 ms + deadline ${DEADLINE_MS} ms)`,
        );
        expect(pausedMs).toBeLessThanOrEqual(2_000 + DEADLINE_MS + SLACK_MS);
        expect(await waitForExit(pid, 30_000)).toBeLessThan(30_000);
        await expectRegistryPause(output, paused!);
        expect((await journal(output)).filter((r) => r.type === 'claimed')).toEqual([]);
      } finally {
        await sleep(Math.max(0, FAULT_MS - (Date.now() - frozenAt)));
        server!.thaw();
      }
      await withRegistry(url, (r) => r.release(blocker, 'blocker-claim'));
      await expectResumeDrains(output, batchId, url, 2);
    });

    it('stopped during a pair: pauses registry_unavailable at once (the socket is gone); resume after a restart drains', async () => {
      const url = await server!.createDatabase('rg_stopped');
      const { output, batchId, pid } = await start('stopped', url, [3, 1]);
      expect(await waitForRecord(output, (r) => r.type === 'container_created', 60_000)).not.toBeNull();
      server!.halt();
      const haltedAt = Date.now();
      try {
        const paused = await waitForRecord(output, (r) => r.type === 'paused', 60_000);
        expect(paused).not.toBeNull();
        const finished = (await journal(output)).find((r) => r.type === 'pair_finished');
        const afterFinish = Date.parse(paused!.at) - Date.parse(finished!.at);
        console.info(`stopped during a pair: paused ${afterFinish} ms after the pair finished`);
        expect(afterFinish).toBeLessThanOrEqual(DEADLINE_MS + SLACK_MS);
        expect(await waitForExit(pid, 30_000)).toBeLessThan(30_000);
        await expectRegistryPause(output, paused!);
      } finally {
        await sleep(Math.max(0, FAULT_MS - (Date.now() - haltedAt)));
        server!.restart();
      }
      await expectResumeDrains(output, batchId, url, 2);
    });

    it('stop --terminate while frozen settles within the stop budget plus one registry deadline; resume drains', async () => {
      const url = await server!.createDatabase('rg_stop');
      const { output, batchId, pid } = await start('stopfrozen', url, [30, 1]);
      expect(await waitForRecord(output, (r) => r.type === 'container_created', 60_000)).not.toBeNull();
      server!.freeze();
      const frozenAt = Date.now();
      try {
        const t0 = Date.now();
        const stopped = await cli(['e1-batch', 'stop', '--output', output, '--terminate']);
        expect(stopped.code, stopped.stderr).toBe(0);
        const exitMs = await waitForExit(pid, 60_000);
        console.info(
          `stop --terminate while frozen: supervisor exited ${exitMs} ms after the stop (stop budget ${STOP_BUDGET_SEC} s, deadline ${DEADLINE_MS} ms)`,
        );
        expect(alive(pid)).toBe(false);
        expect(Date.now() - t0).toBeLessThanOrEqual(STOP_BUDGET_SEC * 1_000 + DEADLINE_MS + SLACK_MS);
        const status = await statusOf(output);
        expect(status.state).toBe('paused');
        expect(status.pause_reasons).toContain('registry_unavailable');
      } finally {
        await sleep(Math.max(0, FAULT_MS - (Date.now() - frozenAt)));
        server!.thaw();
      }
      // The terminated pair has its result (terminated); resume reconciles its slot and runs the other one.
      const resumed = await cli(['e1-batch', 'resume', '--output', output, '--foreground', '--json']);
      expect(resumed.code, resumed.stderr).toBe(0);
      const records = await journal(output);
      const claims = records.filter((r) => r.type === 'claimed').map((r) => r.job_id);
      expect(new Set(claims).size).toBe(claims.length);
      expect(await withRegistry(url, (r) => r.held({ batchId }))).toEqual([]);
      expect(await containersLabelled({ 'roboguide.batch': batchId })).toEqual([]);
      expect((await statusOf(output)).state).toBe('drained');
    });
  });

  /**
   * A network partition, safely: PostgreSQL listens on 127.0.0.1 inside a network namespace of this test's own, the
   * CLI and its supervisor run in that namespace (the engine is reached through its Unix socket), and an iptables
   * rule of that namespace only drops the packets to the server's port. The test reads the registry through the
   * server's Unix socket. Nothing outside the namespace is touched.
   */
  const NETNS = `rg-w27-part-${process.pid}`;
  let netnsReady: string | null = null;
  try {
    execFileSync('ip', ['netns', 'add', NETNS]);
    execFileSync('nsenter', [`--net=/run/netns/${NETNS}`, 'ip', 'link', 'set', 'lo', 'up']);
    execFileSync('nsenter', [`--net=/run/netns/${NETNS}`, 'iptables', '-S']);
    netnsReady = NETNS;
  } catch {
    spawnSync('ip', ['netns', 'del', NETNS]);
  }
  const iptables = (op: '-A' | '-D', port: number): void => {
    execFileSync('nsenter', [
      `--net=/run/netns/${NETNS}`,
      'iptables',
      op,
      'INPUT',
      '-p',
      'tcp',
      '--dport',
      String(port),
      '-j',
      'DROP',
    ]);
  };

  describe.skipIf(netnsReady === null)(
    'PostgreSQL registry partitioned from the supervisor (a network namespace of the test)',
    () => {
      let partServer: TestPostgres | null = null;
      let dropping = false;
      beforeAll(() => {
        partServer = startPostgres({ tcp: true, netns: NETNS });
      });
      afterAll(() => {
        inNamespace = null;
        if (dropping && partServer?.port != null) iptables('-D', partServer.port);
        partServer?.stop();
        spawnSync('ip', ['netns', 'del', NETNS]);
      });

      it('packets to the server dropped during a pair: pauses registry_unavailable within the deadline; resume drains', async () => {
        const password = 'Partition-Pw-7781';
        await partServer!.createPasswordUser('rg_part', password, 'rg_part');
        const port = partServer!.port!;
        const tcpUrl = `postgresql://rg_part@127.0.0.1:${port}/rg_part`;
        const socketUrl = partServer!.url('rg_part');
        inNamespace = { netns: NETNS, password };
        try {
          const { output, batchId, pid } = await start('partition', tcpUrl, [3, 1]);
          expect(await waitForRecord(output, (r) => r.type === 'container_created', 60_000)).not.toBeNull();
          iptables('-A', port);
          dropping = true;
          const droppedAt = Date.now();
          try {
            const paused = await waitForRecord(output, (r) => r.type === 'paused', 60_000);
            expect(paused).not.toBeNull();
            const finished = (await journal(output)).find((r) => r.type === 'pair_finished');
            const afterFinish = Date.parse(paused!.at) - Date.parse(finished!.at);
            console.info(
              `partitioned during a pair: paused ${afterFinish} ms after the pair finished (deadline ${DEADLINE_MS} ms)`,
            );
            expect(afterFinish).toBeLessThanOrEqual(DEADLINE_MS + SLACK_MS);
            expect(await waitForExit(pid, 30_000)).toBeLessThan(30_000);
            await expectRegistryPause(output, paused!);
          } finally {
            await sleep(Math.max(0, FAULT_MS - (Date.now() - droppedAt)));
            iptables('-D', port);
            dropping = false;
          }
          await expectResumeDrains(output, batchId, tcpUrl, 2, socketUrl);
        } finally {
          inNamespace = null;
        }
      });
    },
  );
}
