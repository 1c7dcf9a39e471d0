import { describe, expect, it } from 'vitest';
import type { RunningHandle } from '../../../../src/app/pair/claimed-pair-types.js';
import { SupervisorLoop, type SupervisorLoopPorts } from '../../../../src/app/batch/supervisor-loop.js';
import type { Logger } from '../../../../src/app/ports/logger.js';
import { RoboguideError } from '../../../../src/core/errors.js';
import {
  initialSupervisorState,
  type PairOutcome,
  type SupervisorJournal,
} from '../../../../src/core/supervisor-machine.js';
import { clockAt } from '../../../support/fake-time.js';

/** A promise settled from outside: the tests decide when a pair ends. */
class Gate<T> {
  resolve!: (value: T) => void;
  reject!: (err: unknown) => void;
  readonly promise = new Promise<T>((resolve, reject) => {
    this.resolve = resolve;
    this.reject = reject;
  });
}

class RecordingLogger implements Logger {
  readonly lines: { level: string; fields: Record<string, unknown>; message: string }[] = [];
  info(fields: Record<string, unknown>, message: string): void {
    this.lines.push({ level: 'info', fields, message });
  }
  warn(fields: Record<string, unknown>, message: string): void {
    this.lines.push({ level: 'warn', fields, message });
  }
  error(fields: Record<string, unknown>, message: string): void {
    this.lines.push({ level: 'error', fields, message });
  }
  debug(): void {}
  child(): Logger {
    return this;
  }
}

const handle = (jobId: string): RunningHandle => ({
  jobId,
  containerId: null,
  startedAt: 't',
  deadline: 't',
  terminate: new AbortController(),
  killNow: new AbortController(),
});

/** Fake ports: a settable clock, recorded effects, and one gate per pair so that a test ends each pair itself. */
class FakeWorld {
  nowMs = 1_000_000;
  readonly log: string[] = [];
  readonly journal: SupervisorJournal[] = [];
  readonly logger = new RecordingLogger();
  readonly gates = new Map<string, Gate<PairOutcome>>();
  readonly handles = new Map<string, RunningHandle>();
  sourcesOk: boolean[] = [true];
  journalFails = false;
  waits: number[] = [];
  /** What writeStatus returns (default: done at once); a test holds it to play a slow disk. */
  statusWrite: () => Promise<void> = () => Promise.resolve();
  /** Resolves the loop's wait: immediately, unless a test holds it. */
  delay: (ms: number) => Promise<void> = () => Promise.resolve();
  dispatchThrows = false;

  redact: ((text: string) => string) | undefined;

  ports(): SupervisorLoopPorts {
    const start = (kind: string) => (jobId: string, onRunning: (h: RunningHandle) => void) => {
      if (this.dispatchThrows) throw new Error(`job ${jobId} has no resolved environment`);
      this.log.push(`${kind}:${jobId}`);
      const gate = new Gate<PairOutcome>();
      this.gates.set(jobId, gate);
      const h = handle(jobId);
      this.handles.set(jobId, h);
      onRunning(h);
      return gate.promise;
    };
    return {
      clock: {
        ...clockAt(() => new Date(this.nowMs)),
        sleep: (ms) => {
          this.waits.push(ms);
          return this.delay(ms);
        },
      },
      logger: this.logger,
      ...(this.redact !== undefined ? { redact: this.redact } : {}),
      gpuPeaksMib: () => [],
      journal: (event) => {
        if (this.journalFails) return Promise.reject(new Error('ENOSPC'));
        this.journal.push(event);
        return Promise.resolve();
      },
      writeStatus: () => {
        this.log.push('status');
        return this.statusWrite();
      },
      statusSoon: () => this.log.push('status_soon'),
      checkSources: (phase) => {
        this.log.push(`check:${phase}`);
        return Promise.resolve(this.sourcesOk.shift() ?? true);
      },
      dispatch: start('dispatch'),
      recover: start('recover'),
      watchPlacement: (h, stillRunning) => this.log.push(`watch:${h.jobId}:${stillRunning()}`),
    };
  }
}

/** Lets every queued promise callback run (no timers involved). */
async function flush(): Promise<void> {
  for (let i = 0; i < 20; i++) await Promise.resolve();
}

function loopOf(
  world: FakeWorld,
  jobIds: string[],
  over: Partial<Parameters<typeof initialSupervisorState>[0]> = {},
): SupervisorLoop {
  return new SupervisorLoop(
    world.ports(),
    initialSupervisorState({
      jobIds,
      capacity: { maxWorkers: 1 },
      claimed: [],
      finishedCount: 0,
      pauseReasons: [],
      ...over,
    }),
  );
}

describe('SupervisorLoop', () => {
  it('runs a batch serially to the end: check, dispatch, wait for each pair, leave', async () => {
    const world = new FakeWorld();
    const loop = loopOf(world, ['a', 'b']);
    // Hold the wait until a pair ends (the pair's end wakes the loop).
    world.delay = () => new Promise(() => undefined);
    const running = loop.run();
    await flush();
    expect(world.log).toEqual(['check:before_first_dispatch', 'dispatch:a', 'status_soon', 'watch:a:true']);
    world.gates.get('a')?.resolve({ kind: 'finished', classification: 'completed', pauseReasons: [] });
    await flush();
    world.gates.get('b')?.resolve({ kind: 'finished', classification: 'completed', pauseReasons: [] });
    await running;
    await loop.settled();
    expect(world.log).toEqual([
      'check:before_first_dispatch',
      'dispatch:a',
      'status_soon',
      'watch:a:true',
      'status',
      'dispatch:b',
      'status_soon',
      'watch:b:true',
      'status',
    ]);
    expect(loop.state.finishedCount).toBe(2);
    expect(loop.handles()).toEqual([]);
  });

  it('a status.json write still under way never holds back the next dispatch (issue 26)', async () => {
    const world = new FakeWorld();
    const loop = loopOf(world, ['a', 'b']);
    world.delay = () => new Promise(() => undefined);
    const write = new Gate<void>();
    world.statusWrite = () => write.promise;
    const running = loop.run();
    await flush();
    world.gates.get('a')?.resolve({ kind: 'finished', classification: 'completed', pauseReasons: [] });
    await flush();
    // a's status write has not finished, yet b is already on its way.
    expect(world.log).toContain('dispatch:b');
    expect(loop.state.inFlight).toEqual(new Set(['b']));
    world.gates.get('b')?.resolve({ kind: 'finished', classification: 'completed', pauseReasons: [] });
    write.resolve();
    await running;
    await loop.settled();
    expect(loop.state.finishedCount).toBe(2);
  });

  it('a status.json write that fails is logged and the loop goes on', async () => {
    const world = new FakeWorld();
    world.statusWrite = () => Promise.reject(new Error('ENOSPC'));
    const loop = loopOf(world, ['a']);
    const running = loop.run();
    await flush();
    world.gates.get('a')?.resolve({ kind: 'finished', classification: 'completed', pauseReasons: [] });
    await running;
    await loop.settled();
    await flush();
    expect(loop.state.finishedCount).toBe(1);
    expect(world.logger.lines.some((l) => l.level === 'error' && l.fields['what'] === 'status.json')).toBe(
      true,
    );
  });

  it('a source mismatch before the first dispatch pauses and leaves without dispatching', async () => {
    const world = new FakeWorld();
    world.sourcesOk = [false];
    const loop = loopOf(world, ['a']);
    await loop.run();
    expect(world.log).toEqual(['check:before_first_dispatch', 'status']);
    expect(world.journal).toEqual([{ type: 'paused', reasons: ['fatal', 'inputs_changed'] }]);
    expect(world.logger.lines).toContainEqual({
      level: 'warn',
      fields: { reasons: ['fatal', 'inputs_changed'], job: null },
      message: 'batch paused',
    });
  });

  it('recovers claimed pairs and writes status before the first turn', async () => {
    const world = new FakeWorld();
    const loop = loopOf(world, ['a', 'b'], { claimed: ['a'] });
    await loop.feed({ type: 'recover', jobIds: ['a'] });
    expect(world.log).toEqual(['recover:a', 'status_soon', 'watch:a:true', 'status']);
    expect(loop.state.inFlight).toEqual(new Set(['a']));
  });

  it('terminate: aborts the running pairs, and a pair whose handle arrives later at once', async () => {
    const world = new FakeWorld();
    const loop = loopOf(world, ['a', 'b'], { claimed: ['a'] });
    await loop.feed({ type: 'recover', jobIds: ['a'] });
    await loop.feed({ type: 'signal' });
    expect(world.handles.get('a')?.terminate.signal.aborted).toBe(false);
    await loop.feed({ type: 'signal' });
    expect(world.handles.get('a')?.terminate.signal.aborted).toBe(true);
    expect(world.journal).toEqual([
      { type: 'stop_requested', terminate: false },
      { type: 'stop_requested', terminate: true },
    ]);
    // A recovered pair whose handle arrives after the terminate: aborted in the same turn, before any await.
    await loop.feed({ type: 'recover', jobIds: ['b'] });
    expect(world.handles.get('b')?.terminate.signal.aborted).toBe(true);
  });

  it('a stop while a pair runs: the pair finishes, then the loop leaves', async () => {
    const world = new FakeWorld();
    world.delay = () => new Promise(() => undefined);
    const loop = loopOf(world, ['a', 'b']);
    const running = loop.run();
    await flush();
    await loop.feed({ type: 'stop_requested', terminate: false });
    expect(world.handles.get('a')?.terminate.signal.aborted).toBe(false);
    world.gates.get('a')?.resolve({ kind: 'finished', classification: 'completed', pauseReasons: [] });
    await running;
    expect(world.log.filter((l) => l.startsWith('dispatch'))).toEqual(['dispatch:a']);
  });

  it('a pair task that throws is logged once and pauses the batch harness', async () => {
    const world = new FakeWorld();
    const loop = loopOf(world, ['a', 'b']);
    world.delay = () => new Promise(() => undefined);
    const running = loop.run();
    await flush();
    world.gates.get('a')?.reject(Object.assign(new Error('boom'), { code: 'E_X' }));
    await running;
    await loop.settled();
    // The cause reaches the journal and supervisor.log: the error's code and message, not its class name (issue 27).
    expect(world.journal).toEqual([
      { type: 'paused', reasons: ['harness'], job_id: 'a', cause: { code: 'E_X', message: 'boom' } },
    ]);
    const failed = world.logger.lines.filter((l) => l.message === 'pair task failed: pausing the batch');
    expect(failed).toHaveLength(1);
    expect(failed[0]?.fields).toMatchObject({ err: 'E_X', cause: { code: 'E_X', message: 'boom' } });
    expect(world.logger.lines).toContainEqual({
      level: 'warn',
      fields: { reasons: ['harness'], job: 'a', cause: { code: 'E_X', message: 'boom' } },
      message: 'batch paused',
    });
    expect(loop.state.inFlight.size).toBe(0);
  });

  it('a pair task failing with E_REGISTRY_UNAVAILABLE pauses as registry_unavailable, its message masked', async () => {
    const world = new FakeWorld();
    world.redact = (text: string) => text.replaceAll('hunter2-secret', '***');
    const loop = loopOf(world, ['a', 'b']);
    world.delay = () => new Promise(() => undefined);
    const running = loop.run();
    await flush();
    world.gates
      .get('a')
      ?.reject(
        new RoboguideError(
          'E_REGISTRY_UNAVAILABLE',
          'registry admit did not finish within its deadline of 5000 ms (postgres://u:hunter2-secret@h/db)',
        ),
      );
    await running;
    await loop.settled();
    const cause = {
      code: 'E_REGISTRY_UNAVAILABLE',
      message: 'registry admit did not finish within its deadline of 5000 ms (postgres://u:***@h/db)',
    };
    expect(world.journal).toEqual([
      { type: 'paused', reasons: ['registry_unavailable'], job_id: 'a', cause },
    ]);
    expect(loop.state.pauseReasons).toEqual(['registry_unavailable']);
    expect(JSON.stringify(world.logger.lines)).not.toContain('hunter2-secret');
    expect(world.logger.lines).toContainEqual({
      level: 'warn',
      fields: { reasons: ['registry_unavailable'], job: 'a', cause },
      message: 'batch paused',
    });
  });

  it('a journal that fails does not undo the pause (best effort, fail closed) and is logged', async () => {
    const world = new FakeWorld();
    world.journalFails = true;
    const loop = loopOf(world, ['a']);
    await loop.feed({ type: 'fault' });
    expect(loop.state.pauseReasons).toEqual(['harness']);
    expect(world.logger.lines).toContainEqual({
      level: 'error',
      fields: { err: 'Error', cause: { code: 'Error', message: 'ENOSPC' }, what: 'journal paused' },
      message: 'write failed; continuing fail-closed',
    });
    expect(world.log).toEqual(['status']);
  });

  it('a refused admission waits the retry time on the injected clock, then dispatches again', async () => {
    const world = new FakeWorld();
    const loop = loopOf(world, ['a', 'b'], { claimed: ['a'], finishedCount: 1 });
    // Waits for a pair hold until it ends; the retry wait moves the clock past the retry time.
    world.delay = (ms) => {
      if (ms !== 2_000) return new Promise(() => undefined);
      world.nowMs += ms;
      return Promise.resolve();
    };
    const running = loop.run();
    await flush();
    world.gates.get('b')?.resolve({ kind: 'refused', reason: 'host_full' });
    await flush();
    world.gates.get('b')?.resolve({ kind: 'finished', classification: 'completed', pauseReasons: [] });
    await running;
    expect(world.waits).toEqual([60_000, 2_000, 60_000]);
    expect(world.log.filter((l) => l.startsWith('dispatch'))).toEqual(['dispatch:b', 'dispatch:b']);
    expect(world.journal).toEqual([{ type: 'admission_refused', job_id: 'b', reason: 'host_full' }]);
  });

  it('a dispatch that throws at once is a fault of the supervisor: run rejects', async () => {
    const world = new FakeWorld();
    world.dispatchThrows = true;
    const loop = loopOf(world, ['a']);
    await expect(loop.run()).rejects.toThrow('no resolved environment');
  });

  it('the drain check runs the sources check once more, and a mismatch pauses', async () => {
    const world = new FakeWorld();
    world.sourcesOk = [false];
    const loop = loopOf(world, ['a'], { claimed: ['a'], finishedCount: 1 });
    await loop.feed({ type: 'drain_checked', allResults: true, pinsSources: true });
    expect(world.log).toEqual(['check:drain', 'status']);
    expect(loop.state.pauseReasons).toEqual(['fatal', 'inputs_changed']);
  });

  it('a wake-up before the wait is never lost', async () => {
    const world = new FakeWorld();
    world.delay = () => new Promise(() => undefined);
    const loop = loopOf(world, ['a'], { claimed: ['a'] });
    await loop.feed({ type: 'recover', jobIds: ['a'] });
    // The pair ends (and wakes the loop) before the loop waits: the wait returns at once.
    world.gates.get('a')?.resolve({ kind: 'finished', classification: 'completed', pauseReasons: [] });
    await loop.settled();
    await loop.run();
    expect(loop.state.finishedCount).toBe(1);
  });
});
