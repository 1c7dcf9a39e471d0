import { PassThrough, Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { EngineError } from '../../src/app/ports/engine-error.js';
import { runPairLifecycle } from '../../src/app/pair/pair-lifecycle.js';
import type { LogTarget } from '../../src/app/pair/pair-log-types.js';
import type { PairLaunch, PairLifecycleDeps } from '../../src/app/pair/pair-lifecycle-types.js';
import type { ContainerOutput, ContainerState, WaitResult } from '../../src/app/ports/container-runtime.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import { fakeTime } from '../support/fake-time.js';
import { containerSpec, UnscriptedRuntime } from '../support/fakes.js';

const unavailable = (): EngineError =>
  new EngineError('engine_unavailable', 'Docker engine unreachable (ECONNREFUSED)', {
    statusCode: null,
    engineMessage: 'connect ECONNREFUSED',
  });

type Answer = ContainerState | null | 'refused';

/**
 * An engine that goes away while a pair runs: `wait` reports `engine_lost` (or hangs until its deadline), and
 * `inspect` gives the scripted answers in turn (the last one repeats). Removal makes the container disappear.
 */
class EngineThatGoesAway extends UnscriptedRuntime {
  present = true;
  removed = 0;
  started = 0;
  follows = 0;
  waits: WaitResult[];
  answers: Answer[];
  attachFails = false;

  constructor(waits: WaitResult[], answers: Answer[]) {
    super();
    this.waits = waits;
    this.answers = answers;
  }
  override create() {
    return Promise.resolve({ id: 'c1', name: 'n' });
  }
  override attach(): Promise<ContainerOutput> {
    if (this.attachFails) return Promise.reject(unavailable());
    return Promise.resolve(this.#output('first part\n'));
  }
  followFails = false;
  override follow(): Promise<ContainerOutput> {
    this.follows++;
    if (this.followFails) return Promise.reject(unavailable());
    return Promise.resolve(this.#output('first part\nsecond part\n'));
  }
  override start() {
    this.started++;
    return Promise.resolve();
  }
  override wait(_id: string, options: { deadlineMs: number }): Promise<WaitResult> {
    const next = this.waits.shift();
    if (next !== undefined) return Promise.resolve(next);
    return new Promise((resolve) =>
      setTimeout(() => resolve({ kind: 'deadline' }), Math.max(0, options.deadlineMs - Date.now())),
    );
  }
  override stop() {
    return Promise.resolve();
  }
  override remove() {
    if (this.answers[0] === 'refused') return Promise.reject(unavailable());
    this.removed++;
    this.present = false;
    return Promise.resolve('removed' as const);
  }
  override inspect(): Promise<ContainerState | null> {
    if (!this.present) return Promise.resolve(null);
    const answer = this.answers.length > 1 ? this.answers.shift() : this.answers[0];
    if (answer === 'refused' || answer === undefined) return Promise.reject(unavailable());
    return Promise.resolve(answer);
  }
  override getArchive() {
    return Promise.resolve(null);
  }
  override listByLabel(): Promise<ContainerState[]> {
    return Promise.resolve([]);
  }
  #output(text: string): ContainerOutput {
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    stdout.end(text);
    stderr.end();
    return { stdout, stderr };
  }
}

function container(
  status: ContainerState['status'],
  finishedAt: string | null = null,
  exitCode: number | null = null,
): ContainerState {
  return { id: 'c1', status, exitCode, oomKilled: false, startedAt: null, finishedAt, labels: {} };
}

/** A log file in memory that can be reopened for append (as the evidence store's are). */
function logFiles(): { open: PairLifecycleDeps['openLogs']; text: (name: 'stdout' | 'stderr') => string } {
  const files = { stdout: Buffer.alloc(0), stderr: Buffer.alloc(0) };
  const open = (
    name: 'stdout' | 'stderr',
    append: boolean,
  ): Promise<LogTarget & { existingBytes: number }> => {
    if (!append) files[name] = Buffer.alloc(0);
    const stream = new Writable({
      write(chunk: Buffer, _e, done) {
        files[name] = Buffer.concat([files[name], chunk]);
        done();
      },
    });
    return Promise.resolve({
      stream,
      existingBytes: files[name].length,
      finish: () => Promise.resolve({ bytes: files[name].length, closed: true, failure: null }),
    });
  };
  return {
    open: async (append) => ({ stdout: await open('stdout', append), stderr: await open('stderr', append) }),
    text: (name) => files[name].toString(),
  };
}

/**
 * The lifecycle's clock starts now and moves only when the lifecycle sleeps (probe backoff, removal polling), so no
 * test waits for real backoffs. `onSleep`: what happens in the world while the lifecycle waits.
 */
function deps(
  runtime: EngineThatGoesAway,
  logs = logFiles(),
  onSleep: () => void = () => undefined,
): PairLifecycleDeps {
  const time = fakeTime(new Date().toISOString());
  return {
    runtime: runtime,
    clock: {
      ...time.clock,
      sleep: (ms, signal) => {
        onSleep();
        return time.sleep(ms, signal);
      },
    },
    logger: silentLogger,
    createRedactor: () => new PassThrough(),
    openLogs: logs.open,
    readOutcome: () => Promise.resolve({ state: 'missing' }),
    collectSessions: () => Promise.resolve({ files: 0, bytes: 0, refusals: [] }),
    diagnose: () => Promise.resolve(null),
    verifyAbsentTimeoutMs: 300,
    logDrainTimeoutMs: 200,
    collectionEngineWaitMs: 300,
  };
}

function launch(deadlineInMs = 60_000): PairLaunch {
  return {
    container: containerSpec(),
    outcomePath: '/x/o.json',
    sessionsDir: '/s',
    stopBudgetSec: 1,
    secrets: [],
    deadlineMs: Date.now() + deadlineInMs,
  };
}

const lost = (): WaitResult => ({ kind: 'engine_lost', lastSeenAliveMs: Date.now() - 1_000 });
const stoppedNow = (): ContainerState => container('exited', new Date().toISOString(), 143);

describe('a pair whose engine goes away (issue 10)', () => {
  it('restart: inspected again once the engine answers, ends now as engine_restarted, logs read again, container removed', async () => {
    const runtime = new EngineThatGoesAway([lost()], ['refused', 'refused', stoppedNow()]);
    const logs = logFiles();
    const r = await runPairLifecycle(deps(runtime, logs), launch());
    expect(r.engineLoss).toBe('engine_restarted');
    expect(r.timedOut).toBe(false);
    expect(r.engineError?.kind).toBe('engine_restarted');
    expect(r.engineError?.message).toMatch(/stopped at .* \(exit code 143\)/);
    expect(r.container.exit_code).toBe(143);
    // The stream the engine cut is continued from the engine's log, without duplicating what was on disk; once the
    // container stopped, the engine's copy is read once more and checked against the whole file (nothing to add).
    expect(runtime.follows).toBe(2);
    expect(logs.text('stdout')).toBe('first part\nsecond part\n');
    expect(r.logFailure).toBeNull();
    expect(r.logs.stdout.closed).toBe(true);
    expect(runtime.removed).toBe(1);
    expect(r.cleanup.verified_absent).toBe(true);
  });

  it('restart whose log cannot be followed again: result.json still counts the bytes already on disk', async () => {
    const runtime = new EngineThatGoesAway([lost()], ['refused', stoppedNow()]);
    runtime.followFails = true;
    const logs = logFiles();
    const r = await runPairLifecycle(deps(runtime, logs), launch());
    expect(r.engineLoss).toBe('engine_restarted');
    // Tried again once the container stopped (it fails again: the report of the bytes on disk stands).
    expect(runtime.follows).toBe(2);
    expect(logs.text('stdout')).toBe('first part\n');
    expect(r.logs.stdout.bytes).toBe('first part\n'.length);
    expect(r.cleanup.verified_absent).toBe(true);
  });

  it('a container the engine no longer knows ends the pair as container_vanished', async () => {
    const runtime = new EngineThatGoesAway([lost()], ['refused', null]);
    const r = await runPairLifecycle(deps(runtime), launch());
    expect(r.engineLoss).toBe('container_vanished');
    expect(r.logFailure).toBeNull();
    expect(runtime.follows).toBe(0);
    expect(r.cleanup.verified_absent).toBe(true);
  });

  it('a container that survived (a dropped connection only) is waited for again; its exit is an ordinary one', async () => {
    const runtime = new EngineThatGoesAway(
      [lost(), { kind: 'exited', exitCode: 0 }],
      [container('running'), container('exited', new Date().toISOString(), 0)],
    );
    const logs = logFiles();
    const r = await runPairLifecycle(deps(runtime, logs), launch());
    expect(r.engineLoss).toBeNull();
    expect(r.engineError).toBeNull();
    expect(r.container.exit_code).toBe(0);
    expect(logs.text('stdout')).toBe('first part\nsecond part\n');
  });

  it('an exit clearly before the connection was lost is an ordinary exit whose report was lost', async () => {
    const runtime = new EngineThatGoesAway(
      [lost()],
      [container('exited', new Date(Date.now() - 60_000).toISOString(), 0)],
    );
    const r = await runPairLifecycle(deps(runtime), launch());
    expect(r.engineLoss).toBeNull();
    expect(r.container.exit_code).toBe(0);
  });

  it('an engine that never answers again ends the pair at its deadline as engine_unreachable, the slot kept (removal unverified)', async () => {
    const runtime = new EngineThatGoesAway([lost()], ['refused']);
    const r = await runPairLifecycle(deps(runtime), launch(500));
    expect(r.engineLoss).toBe('engine_unreachable');
    expect(r.timedOut).toBe(false);
    expect(r.engineError?.message).toMatch(/did not answer again before the pair's deadline/);
    expect(r.cleanup.verified_absent).toBe(false);
  });

  it('engine lost between create and start: the never-started container ends the pair as engine_restarted, not started again', async () => {
    const runtime = new EngineThatGoesAway([], ['refused', container('created')]);
    runtime.attachFails = true;
    const r = await runPairLifecycle(deps(runtime), launch());
    expect(r.engineLoss).toBe('engine_restarted');
    expect(r.engineError?.message).toMatch(/never started/);
    expect(runtime.started).toBe(0);
    expect(r.engineFault).toBeNull();
    // No output ever existed: the log files are complete (empty), not a failed write.
    expect(r.logs).toEqual({ stdout: { bytes: 0, closed: true }, stderr: { bytes: 0, closed: true } });
    expect(r.logFailure).toBeNull();
    expect(r.cleanup.verified_absent).toBe(true);
  });

  it('a stop --terminate while the engine is away ends the pair as terminated', async () => {
    const runtime = new EngineThatGoesAway([lost()], ['refused']);
    const terminate = new AbortController();
    // The operator asks for the stop while the lifecycle waits between probes of the absent engine.
    const r = await runPairLifecycle(
      deps(runtime, logFiles(), () => terminate.abort()),
      { ...launch(), terminate: terminate.signal },
    );
    expect(r.terminated).toBe(true);
    expect(r.engineLoss).toBeNull();
  });
});
