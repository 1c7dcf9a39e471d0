/**
 * Engine kill matrix (issue 10): the batch supervisor (the CLI, as a child process) runs against a throwaway second
 * engine, and that dockerd is SIGKILLed (a) while a pair runs, (b) between create and start, (c) during collection,
 * (d) while the supervisor is itself down; it is started again a few seconds later. Each cell: the pair's result
 * comes soon after the engine's return although its `timeout_seconds` is 36060, with the reason that says what
 * happened; the batch goes on; `resume` finds nothing left to do; no pair ran twice; no container and no slot is
 * left. The seconds from the engine's return to the pair's result are printed for the report. (e) keeps the engine
 * away past a pair's deadline: `engine_unreachable`, slot held, batch paused, and resume completes the batch.
 */
import { access, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DockerContainerRuntime } from '../../src/adapters/docker/docker-container-runtime.js';
import { driverRuns, runCli, type CliRun } from '../support/crash-batch.js';
import { DRIVER_IMAGE, noDocker } from '../support/docker.js';
import { namespaceSupportProblem, startSecondEngine, type SecondEngine } from '../support/second-engine.js';
import { until } from '../support/until.js';

const required = process.env['REQUIRE_DOCKER'] === '1';
const namespaceProblem = noDocker ? 'no Docker engine' : await namespaceSupportProblem();
const skipSecondEngine = namespaceProblem !== null && !required;
if (skipSecondEngine)
  console.warn(`\n*** engine-restart matrix on a second engine SKIPPED: ${namespaceProblem} ***\n`);

/** The engine stays down this long (the issue asks for 2–10 s; ENGINE_DOWN_SECONDS overrides, e.g. for figures). */
const ENGINE_DOWN_MS = Number(process.env['ENGINE_DOWN_SECONDS'] ?? 3) * 1000;

interface Fixture {
  readonly root: string;
  readonly manifest: string;
  readonly output: string;
  readonly registry: string;
  readonly counter: string;
  readonly pauseDir: string;
  readonly jobs: readonly string[];
}

interface ResultView {
  readonly classification: string;
  readonly reasons: readonly string[];
  readonly cleanup: { readonly verified_absent: boolean };
  readonly engine_error: { readonly kind: string; readonly message: string } | null;
  readonly sessions: { readonly files: number };
}

const figures: string[] = [];
const fixtures: Fixture[] = [];
let engine: SecondEngine | undefined;
let engineRuntime: DockerContainerRuntime;
let work: string;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}

/** Three pairs, the middle one (`p2`) being the one the engine fails under; every pair has the default budget. */
async function fixture(label: string, victim: readonly string[], victimTimeoutSec = 36060): Promise<Fixture> {
  const root = await mkdtemp(join(work, `${label}-`));
  const cwd = join(root, 'work');
  await mkdir(join(cwd, 'out'), { recursive: true });
  const pauseDir = join(root, 'pause');
  await mkdir(pauseDir);
  const actions: Record<string, readonly string[]> = {
    p1: ['count', 'outcome=completed'],
    p2: ['count', ...victim],
    p3: ['count', 'outcome=completed'],
  };
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    image: DRIVER_IMAGE,
    jobs: Object.entries(actions).map(([id, a]) => ({
      job_id: id,
      argv: ['/opt/driver/run', ...a],
      cwd,
      outcome_path: join(cwd, 'out', `${id}.json`),
      environment: {},
      timeout_seconds: id === 'p2' ? victimTimeoutSec : 36060,
    })),
    source_sha256: {},
    capacity: { max_workers: 1 },
    stop_budget_seconds: 5,
  };
  const path = join(root, 'manifest.json');
  await writeFile(path, JSON.stringify(manifest, null, 2));
  const fx: Fixture = {
    root,
    manifest: path,
    output: join(root, 'D'),
    registry: join(root, 'registry.db'),
    counter: join(cwd, 'driver-runs.log'),
    pauseDir,
    jobs: Object.keys(actions),
  };
  fixtures.push(fx);
  return fx;
}

function cli(fx: Fixture, verb: 'start' | 'resume', env: Record<string, string> = {}): Promise<CliRun> {
  const args =
    verb === 'start'
      ? [
          'e1-batch',
          'start',
          '--manifest',
          fx.manifest,
          '--output',
          fx.output,
          '--registry',
          fx.registry,
          '--foreground',
        ]
      : ['e1-batch', 'resume', '--output', fx.output, '--foreground'];
  return runCli(args, { env: { DOCKER_HOST: `unix://${engine?.socketPath ?? ''}`, ...env } });
}

async function readJson<T>(path: string): Promise<T> {
  return JSON.parse(await readFile(path, 'utf8')) as T;
}

const resultPath = (fx: Fixture, job: string): string => join(fx.output, 'jobs', job, 'result.json');

/** Run the supervisor paused at the n-th passage of a pause point (see src/app/ports/failpoints.ts). */
function pausedAt(fx: Fixture, point: string): Record<string, string> {
  return { ROBOGUIDE_PAUSEPOINT: point, ROBOGUIDE_PAUSEPOINT_DIR: fx.pauseDir };
}

/** The engine restarts under these waits: a probe that throws (engine down, file half-written) is "not yet". */
const SLOW = { timeoutMs: 120_000, ignoreErrors: true } as const;

async function reached(fx: Fixture, name: string): Promise<void> {
  await until(
    async () => ((await exists(join(fx.pauseDir, `${name}.reached`))) ? true : undefined),
    `pause point ${name}`,
    SLOW,
  );
}

async function release(fx: Fixture, name: string): Promise<void> {
  await writeFile(join(fx.pauseDir, `${name}.go`), '');
}

/** The victim's container on the second engine once it runs. */
async function runningContainerOf(fx: Fixture, job: string): Promise<string> {
  return until(
    async () => {
      const receipt = await readJson<{ container_id: string | null }>(
        join(fx.output, 'jobs', job, 'receipt.json'),
      );
      if (receipt.container_id === null) return undefined;
      const state = await engineRuntime.inspect(receipt.container_id);
      return state?.status === 'running' ? receipt.container_id : undefined;
    },
    `${job} running`,
    SLOW,
  );
}

/** Kill the engine, keep it down, start it again; returns the moment it answers again. */
async function killAndRestartEngine(
  whileDown: () => Promise<void> = () => Promise.resolve(),
): Promise<number> {
  await engine?.kill();
  await whileDown();
  await sleep(ENGINE_DOWN_MS);
  await engine?.restart();
  return Date.now();
}

/** Seconds from the engine's return to the victim's result.json. */
async function secondsToResult(fx: Fixture, back: number): Promise<number> {
  await until(async () => ((await exists(resultPath(fx, 'p2'))) ? true : undefined), 'p2 result', SLOW);
  return (Date.now() - back) / 1000;
}

/** 0 pairs run twice, 0 containers left on the second engine, 0 slots held, SUMMARY drained: the violations. */
async function leftovers(fx: Fixture): Promise<string[]> {
  const v: string[] = [];
  const { batch_id: batchId } = await readJson<{ batch_id: string }>(join(fx.output, 'batch.json'));
  for (const [job, n] of await driverRuns(fx.counter)) if (n > 1) v.push(`${job} ran ${n} times`);
  for (const job of fx.jobs) if (!(await exists(resultPath(fx, job)))) v.push(`${job}: no result.json`);
  const left = await engineRuntime.listByLabel({ 'roboguide.batch': batchId });
  if (left.length > 0) v.push(`${left.length} container(s) left: ${left.map((c) => c.id).join(',')}`);
  const db = new DatabaseSync(fx.registry, { readOnly: true });
  try {
    const held = db
      .prepare("SELECT job_id FROM reservations WHERE batch_id = ? AND state = 'held'")
      .all(batchId);
    if (held.length > 0) v.push(`slots held: ${JSON.stringify(held)}`);
  } finally {
    db.close();
  }
  const summary = await readJson<{ state: string }>(join(fx.output, 'SUMMARY.json'));
  if (summary.state !== 'drained') v.push(`SUMMARY state ${summary.state}`);
  return v;
}

/** Resume after the batch finished: exits 0, runs nothing again, and everything still holds. */
async function resumeAndCheck(fx: Fixture): Promise<void> {
  const resumed = await cli(fx, 'resume');
  expect(resumed.code, resumed.stderr.slice(-2000)).toBe(0);
  expect(await leftovers(fx)).toEqual([]);
}

beforeAll(async () => {
  if (skipSecondEngine) return;
  if (namespaceProblem !== null)
    throw new Error(`REQUIRE_DOCKER=1 but a second engine cannot be started: ${namespaceProblem}`);
  work = await mkdtemp(join(tmpdir(), 'rg-restart-'));
  engine = await startSecondEngine({ nvidiaHook: false, name: 'restart' });
  engineRuntime = new DockerContainerRuntime({ socketPath: engine.socketPath });
});

/** A supervisor a failed test left running (ours: its command line names the fixture) is ended by its pid. */
async function endLeftSupervisors(): Promise<void> {
  for (const fx of fixtures) {
    const pid = await readJson<{ pid: number }>(join(fx.output, 'supervisor.json')).then(
      (s) => s.pid,
      () => null,
    );
    if (pid === null) continue;
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (cmdline.includes(fx.output)) process.kill(pid, 'SIGKILL');
  }
}

afterAll(async () => {
  await endLeftSupervisors();
  console.log(
    `engine kill matrix (engine down ${ENGINE_DOWN_MS / 1000} s, timeout_seconds 36060):\n  ${figures.join('\n  ')}`,
  );
  await engine?.stop();
  if (work !== undefined && process.env['KEEP_RESTART_DIRS'] !== '1')
    await rm(work, { recursive: true, force: true });
});

describe.skipIf(skipSecondEngine)('engine SIGKILLed and restarted under a batch (second engine)', () => {
  it('(a) while a pair runs: the pair ends as engine_restarted soon after the engine is back; the batch goes on', async () => {
    const fx = await fixture('a', ['sleep=600', 'outcome=completed']);
    const run = cli(fx, 'start');
    await runningContainerOf(fx, 'p2');
    const back = await killAndRestartEngine();
    const seconds = await secondsToResult(fx, back);
    figures.push(`(a) while running: result ${seconds.toFixed(1)} s after the engine answered again`);
    const finished = await run;
    expect(finished.code, finished.stderr.slice(-2000)).toBe(0);
    const result = await readJson<ResultView>(resultPath(fx, 'p2'));
    expect(result.classification).toBe('infrastructure_failure');
    expect(result.reasons).toContain('engine_restarted');
    expect(result.reasons).not.toContain('timeout');
    expect(result.cleanup.verified_absent).toBe(true);
    expect((await readJson<ResultView>(resultPath(fx, 'p3'))).classification).toBe('completed');
    expect(await leftovers(fx)).toEqual([]);
    await resumeAndCheck(fx);
  });

  it('(b) between create and start: the never-started container ends the pair as engine_restarted; it never runs', async () => {
    const fx = await fixture('b', ['outcome=completed']);
    const run = cli(fx, 'start', pausedAt(fx, 'after_container_created#2'));
    await reached(fx, 'after_container_created');
    const back = await killAndRestartEngine(() => release(fx, 'after_container_created'));
    const seconds = await secondsToResult(fx, back);
    figures.push(
      `(b) between create and start: result ${seconds.toFixed(1)} s after the engine answered again`,
    );
    const finished = await run;
    expect(finished.code, finished.stderr.slice(-2000)).toBe(0);
    const result = await readJson<ResultView>(resultPath(fx, 'p2'));
    expect(result.classification).toBe('infrastructure_failure');
    expect(result.reasons).toContain('engine_restarted');
    expect(result.engine_error?.message).toMatch(/never started/);
    expect((await driverRuns(fx.counter)).get('p2')).toBeUndefined();
    expect((await readJson<ResultView>(resultPath(fx, 'p3'))).classification).toBe('completed');
    expect(await leftovers(fx)).toEqual([]);
    await resumeAndCheck(fx);
  });

  it('(c) during collection: collection waits for the engine and the pair keeps its own verdict and sessions', async () => {
    const fx = await fixture('c', ['session=success', 'outcome=completed']);
    const run = cli(fx, 'start', pausedAt(fx, 'before_collection#2'));
    await reached(fx, 'before_collection');
    const back = await killAndRestartEngine(() => release(fx, 'before_collection'));
    const seconds = await secondsToResult(fx, back);
    figures.push(`(c) during collection: result ${seconds.toFixed(1)} s after the engine answered again`);
    const finished = await run;
    expect(finished.code, finished.stderr.slice(-2000)).toBe(0);
    const result = await readJson<ResultView>(resultPath(fx, 'p2'));
    expect(result.classification).toBe('completed');
    expect(result.reasons).toEqual([]);
    expect(result.sessions.files).toBe(1);
    expect(result.cleanup.verified_absent).toBe(true);
    expect(await leftovers(fx)).toEqual([]);
    await resumeAndCheck(fx);
  });

  it('(d) while the supervisor is down: resume finds the container the restart stopped and ends the pair as engine_restarted', async () => {
    const fx = await fixture('d', ['sleep=600', 'outcome=completed']);
    const run = cli(fx, 'start');
    await runningContainerOf(fx, 'p2');
    const { pid } = await readJson<{ pid: number }>(join(fx.output, 'supervisor.json'));
    process.kill(pid, 'SIGKILL');
    expect((await run).signal).toBe('SIGKILL');
    const back = await killAndRestartEngine();
    const resumed = await cli(fx, 'resume');
    const seconds = await secondsToResult(fx, back);
    figures.push(
      `(d) supervisor down: result ${seconds.toFixed(1)} s after the engine answered again (resume started then)`,
    );
    expect(resumed.code, resumed.stderr.slice(-2000)).toBe(0);
    const result = await readJson<ResultView>(resultPath(fx, 'p2'));
    expect(result.classification).toBe('infrastructure_failure');
    expect(result.reasons).toContain('engine_restarted');
    expect((await driverRuns(fx.counter)).get('p2')).toBe(1);
    expect((await readJson<ResultView>(resultPath(fx, 'p3'))).classification).toBe('completed');
    expect(await leftovers(fx)).toEqual([]);
    await resumeAndCheck(fx);
  });

  it('(e) an engine that is not back by the deadline: engine_unreachable, slot held, batch paused; resume completes it', async () => {
    const fx = await fixture('e', ['sleep=600', 'outcome=completed'], 20);
    const run = cli(fx, 'start');
    await runningContainerOf(fx, 'p2');
    await engine?.kill();
    const paused = await run;
    const result = await readJson<ResultView>(resultPath(fx, 'p2'));
    expect(result.classification).toBe('harness_failure');
    expect(result.reasons).toEqual(expect.arrayContaining(['cleanup_unverified', 'engine_unreachable']));
    expect(result.reasons).not.toContain('timeout');
    expect(result.cleanup.verified_absent).toBe(false);
    expect(await readJson<{ state: string }>(join(fx.output, 'SUMMARY.json'))).toMatchObject({
      state: 'paused',
    });
    const db = new DatabaseSync(fx.registry, { readOnly: true });
    try {
      const held = db.prepare("SELECT job_id FROM reservations WHERE state = 'held'").all();
      expect(held.map((r) => r['job_id'])).toEqual(['p2']);
    } finally {
      db.close();
    }
    expect(await exists(resultPath(fx, 'p3'))).toBe(false);
    await engine?.restart();
    const back = Date.now();
    const resumed = await cli(fx, 'resume');
    figures.push(
      `(e) not back by a 20 s deadline: supervisor paused (exit ${String(paused.code)}); after the engine's return, resume drained in ${((Date.now() - back) / 1000).toFixed(1)} s`,
    );
    expect(resumed.code, resumed.stderr.slice(-2000)).toBe(0);
    expect((await readJson<ResultView>(resultPath(fx, 'p3'))).classification).toBe('completed');
    expect(await leftovers(fx)).toEqual([]);
    await resumeAndCheck(fx);
  });
});
