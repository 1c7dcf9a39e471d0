/**
 * Logs after a reattach (docs/spec.md 6.6): the engine's copy is checked against the bytes the file already holds and
 * only what follows is appended; a copy that does not continue the file is a named gap; the drain before the removal
 * has no fixed cut (it follows progress) and the container is removed only once both files are finished.
 */
import { PassThrough, Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { systemClock } from '../../src/adapters/system-clock.js';
import type { Clock } from '../../src/app/ports/clock.js';
import { runPairLifecycle } from '../../src/app/pair/pair-lifecycle.js';
import type { PairLaunch, PairLifecycleDeps } from '../../src/app/pair/pair-lifecycle-types.js';
import { PairLogs } from '../../src/app/pair/pair-logs.js';
import type { DrainBounds, LogStreamName, OpenedLog } from '../../src/app/pair/pair-log-types.js';
import type {
  ContainerOutput,
  ContainerRuntime,
  ContainerState,
} from '../../src/app/ports/container-runtime.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import { fakeTime, type FakeTime } from '../support/fake-time.js';
import { containerSpec } from '../support/fakes.js';

/** A log file in memory that may already hold `prefix` (a reattach appends after it) and can be read back. */
class MemoryLog {
  readonly chunks: Buffer[];
  finished = false;
  constructor(readonly prefix = '') {
    this.chunks = prefix === '' ? [] : [Buffer.from(prefix)];
  }
  text(): string {
    return Buffer.concat(this.chunks).toString();
  }
  opened(readBack = true): OpenedLog {
    const stream = new Writable({
      write: (chunk: Buffer, _e, done) => {
        this.chunks.push(chunk);
        done();
      },
      final: (done) => {
        this.finished = true;
        done();
      },
      destroy: (err, done) => {
        this.finished = true;
        done(err);
      },
    });
    const bytes = (): number => this.chunks.reduce((n, c) => n + c.length, 0);
    const existing = Buffer.concat(this.chunks);
    // Read back in small pieces, so the check crosses chunk boundaries of both sides.
    async function* back(): AsyncIterable<Uint8Array> {
      for (let i = 0; i < existing.length; i += 3) {
        await Promise.resolve();
        yield existing.subarray(i, i + 3);
      }
    }
    return {
      stream,
      existingBytes: existing.length,
      finish: async () => {
        if (!stream.writableFinished) await new Promise<void>((resolve) => stream.end(resolve));
        return { bytes: bytes(), closed: true, failure: null };
      },
      ...(readBack ? { readBack: back } : {}),
    };
  }
}

const logsOf = (files: Record<LogStreamName, MemoryLog>, readBack = true) =>
  new PairLogs(
    {
      openLogs: () =>
        Promise.resolve({ stdout: files.stdout.opened(readBack), stderr: files.stderr.opened(readBack) }),
      createRedactor: () => new PassThrough(),
      logger: silentLogger,
      clock: systemClock,
    },
    [],
    () => 'c1',
  );

/** The engine's copy of one stream, given in pieces of `piece` bytes. */
function engineCopy(text: string, piece = 5): PassThrough {
  const out = new PassThrough();
  for (let i = 0; i < text.length; i += piece) out.write(text.slice(i, i + piece));
  out.end();
  return out;
}

/** The fake clock moves by the sleep; each sleep also lets the streams' pending callbacks run, as real time would. */
const yielding =
  (time: FakeTime): Clock['sleep'] =>
  async (ms, signal) => {
    await time.sleep(ms, signal);
    await new Promise((resolve) => setImmediate(resolve));
  };

function bounds(time: FakeTime, overrides: Partial<DrainBounds> = {}): DrainBounds {
  return {
    stallMs: 30_000,
    untilMs: time.nowMs() + 3_600_000,
    pollMs: 1_000,
    clock: { ...time.clock, sleep: yielding(time) },
    ...overrides,
  };
}

describe("a reattached log continues the file where it ends, checked against the engine's copy", () => {
  it('appends exactly what follows the bytes already kept, whatever the chunking of either side', async () => {
    const files = { stdout: new MemoryLog('line 1\nline 2\nli'), stderr: new MemoryLog('') };
    const logs = logsOf(files);
    await logs.connect(
      { stdout: engineCopy('line 1\nline 2\nline 3\nline 4\n', 4), stderr: engineCopy('e\n') },
      true,
    );
    await logs.drain(bounds(fakeTime()));
    const closed = await logs.close(1_000, true);
    expect(files.stdout.text()).toBe('line 1\nline 2\nline 3\nline 4\n');
    expect(files.stderr.text()).toBe('e\n');
    expect(closed.logs.stdout).toEqual({ bytes: 28, closed: true });
    expect(closed.failure).toBeNull();
  });

  it('an engine copy that does not start with the file (its start rotated away) appends nothing and names the gap', async () => {
    const files = { stdout: new MemoryLog('line 1\nline 2\n'), stderr: new MemoryLog('') };
    const logs = logsOf(files);
    // The engine kept only the later part: joining it after the file would splice two places of the stream.
    await logs.connect({ stdout: engineCopy('line 2\nline 3\nline 4\n'), stderr: engineCopy('') }, true);
    await logs.drain(bounds(fakeTime()));
    const closed = await logs.close(1_000, true);
    expect(files.stdout.text()).toBe('line 1\nline 2\n');
    expect(closed.logs.stdout).toEqual({
      bytes: 14,
      closed: true,
      incomplete: { cause: 'engine_copy_differs', differs_at: 5, engine_bytes: 21 },
    });
    expect(closed.logs.stderr).toEqual({ bytes: 0, closed: true });
  });

  it('an engine copy shorter than the file is a gap (engine_copy_short), never a silent end', async () => {
    const files = { stdout: new MemoryLog('abcdefgh'), stderr: new MemoryLog('') };
    const logs = logsOf(files);
    await logs.connect({ stdout: engineCopy('abcd'), stderr: engineCopy('') }, true);
    await logs.drain(bounds(fakeTime()));
    const closed = await logs.close(1_000, true);
    expect(files.stdout.text()).toBe('abcdefgh');
    expect(closed.logs.stdout.incomplete).toEqual({
      cause: 'engine_copy_short',
      differs_at: 4,
      engine_bytes: 4,
    });
  });

  it('without a way to read the file back (a file at its cap) the prefix is skipped unchecked', async () => {
    const files = { stdout: new MemoryLog('XXXX'), stderr: new MemoryLog('') };
    const logs = logsOf(files, false);
    await logs.connect({ stdout: engineCopy('abcdef'), stderr: engineCopy('') }, true);
    await logs.drain(bounds(fakeTime()));
    const closed = await logs.close(1_000, true);
    expect(files.stdout.text()).toBe('XXXXef');
    expect(closed.logs.stdout.incomplete).toBeUndefined();
  });
});

describe('the drain before the removal', () => {
  /** A stream that gives one piece each time the drain sleeps, for `pieces` sleeps, then ends (or stays open). */
  function trickle(
    time: FakeTime,
    pieces: number,
    end: boolean,
  ): { stream: PassThrough; sleep: Clock['sleep'] } {
    const stream = new PassThrough();
    let given = 0;
    return {
      stream,
      sleep: async (ms, signal) => {
        await time.sleep(ms, signal);
        if (given < pieces) stream.write(`piece ${++given}\n`);
        else if (end && !stream.writableEnded) stream.end();
        await new Promise((resolve) => setImmediate(resolve));
      },
    };
  }

  it('goes on as long as bytes keep arriving, far past the old fixed 10 s cut', async () => {
    const time = fakeTime();
    const files = { stdout: new MemoryLog(), stderr: new MemoryLog() };
    const logs = logsOf(files);
    const slow = trickle(time, 120, true);
    await logs.connect({ stdout: slow.stream, stderr: engineCopy('') }, false);
    const startMs = time.nowMs();
    await logs.drain(bounds(time, { clock: { ...time.clock, sleep: slow.sleep } }));
    expect(time.nowMs() - startMs).toBeGreaterThanOrEqual(120_000);
    expect(files.stdout.finished).toBe(true);
    const closed = await logs.close(1_000, true);
    expect(files.stdout.text().split('\n')).toHaveLength(121);
    expect(closed.logs.stdout.incomplete).toBeUndefined();
  });

  it('stops when no byte arrived for the stall bound; the cut stream is a named gap and its file is finished', async () => {
    const time = fakeTime();
    const files = { stdout: new MemoryLog(), stderr: new MemoryLog() };
    const logs = logsOf(files);
    const stuck = trickle(time, 3, false);
    await logs.connect({ stdout: stuck.stream, stderr: engineCopy('done\n') }, false);
    const startMs = time.nowMs();
    await logs.drain(bounds(time, { clock: { ...time.clock, sleep: stuck.sleep }, stallMs: 30_000 }));
    const took = time.nowMs() - startMs;
    expect(took).toBeGreaterThanOrEqual(33_000);
    expect(took).toBeLessThan(40_000);
    expect(files.stdout.finished).toBe(true);
    const closed = await logs.close(1_000, true);
    expect(closed.logs.stdout).toEqual({
      bytes: 24,
      closed: true,
      incomplete: { cause: 'drain_stalled', engine_bytes: 24 },
    });
    expect(closed.logs.stderr).toEqual({ bytes: 5, closed: true });
    expect(closed.failure).toBeNull();
  });

  it('stops at its deadline even while bytes keep arriving (a container that never stops writing)', async () => {
    const time = fakeTime();
    const files = { stdout: new MemoryLog(), stderr: new MemoryLog() };
    const logs = logsOf(files);
    const endless = trickle(time, Number.POSITIVE_INFINITY, false);
    await logs.connect({ stdout: endless.stream, stderr: engineCopy('') }, false);
    const untilMs = time.nowMs() + 50_000;
    await logs.drain(bounds(time, { clock: { ...time.clock, sleep: endless.sleep }, untilMs }));
    expect(time.nowMs()).toBeGreaterThanOrEqual(untilMs);
    expect(time.nowMs()).toBeLessThan(untilMs + 2_000);
    const closed = await logs.close(1_000, true);
    expect(closed.logs.stdout.incomplete?.cause).toBe('drain_deadline');
  });
});

/**
 * A reattached pair whose container has exited: the engine's copy of stdout is 400 numbered lines. The first follow
 * gives `firstCopy` of them a piece per drain poll (slowly, 5 bytes per fake second), later follows the whole copy.
 */
function reattachedWorld(firstCopyLines: number, finishedAt: string) {
  const time = fakeTime('2026-12-02T00:00:00Z');
  const files = { stdout: new MemoryLog('0000\n0001\n'), stderr: new MemoryLog('') };
  const full = Array.from({ length: 400 }, (_, i) => `${String(i).padStart(4, '0')}\n`).join('');
  const first = full.slice(0, firstCopyLines * 5);
  const slow = new PassThrough();
  const world = { present: true, follows: 0, finishedAtRemoval: null as boolean | null, files, full };
  let at = 0;
  const sleep: Clock['sleep'] = async (ms, signal) => {
    await time.sleep(ms, signal);
    if (at < first.length) {
      slow.write(first.slice(at, at + 5));
      at += 5;
    } else if (!slow.writableEnded) slow.end();
    await new Promise((resolve) => setImmediate(resolve));
  };
  const state = (): ContainerState | null =>
    world.present
      ? {
          id: 'c1',
          status: 'exited',
          exitCode: 0,
          oomKilled: false,
          startedAt: '2026-12-01T23:00:00Z',
          finishedAt,
          labels: {},
        }
      : null;
  const runtime: Partial<ContainerRuntime> = {
    follow: (): Promise<ContainerOutput> =>
      Promise.resolve({
        stdout: world.follows++ === 0 ? slow : engineCopy(full, 64),
        stderr: engineCopy(''),
      }),
    inspect: () => Promise.resolve(state()),
    wait: () => Promise.resolve({ kind: 'exited' as const, exitCode: 0 }),
    stop: () => Promise.resolve(),
    remove: () => {
      world.finishedAtRemoval ??= files.stdout.finished;
      world.present = false;
      return Promise.resolve('removed' as const);
    },
    getArchive: () => Promise.resolve(null),
    listByLabel: () => Promise.resolve([]),
    events: () => Promise.resolve({ events: [], complete: true }),
  } as Partial<ContainerRuntime>;
  const deps: PairLifecycleDeps = {
    runtime: runtime as ContainerRuntime,
    // Fake time for the waits the lifecycle sleeps; the logs' settle timer is real, as the slow copy moves only when
    // the lifecycle sleeps (a fake timer nobody advances would never end the settle).
    clock: { ...time.clock, sleep, setTimer: systemClock.setTimer },
    logger: silentLogger,
    createRedactor: () => new PassThrough(),
    openLogs: () => Promise.resolve({ stdout: files.stdout.opened(), stderr: files.stderr.opened() }),
    readOutcome: () => Promise.resolve({ state: 'missing' }),
    collectSessions: () => Promise.resolve({ files: 0, bytes: 0, refusals: [] }),
    diagnose: () => Promise.resolve(null),
    verifyAbsentTimeoutMs: 300,
    logDrainTimeoutMs: 200,
  };
  const launch: PairLaunch = {
    container: containerSpec(),
    outcomePath: '/x/o.json',
    sessionsDir: '/s',
    stopBudgetSec: 1,
    secrets: [],
    reattach: { containerId: 'c1', claimedAtMs: Date.parse('2026-12-01T23:00:00Z') },
    deadlineMs: Date.parse('2026-12-02T00:01:00Z'),
  };
  return { world, run: () => runPairLifecycle(deps, launch) };
}

describe('the lifecycle removes a reattached container only after its logs are drained and finished', () => {
  it('a slow engine copy (400 s of the fake clock) is read to its end before the removal, and the file is complete', async () => {
    const { world, run } = reattachedWorld(400, '2026-12-01T23:30:00Z');
    const r = await run();
    expect(world.finishedAtRemoval).toBe(true);
    expect(world.files.stdout.text()).toBe(world.full);
    expect(r.logs.stdout).toEqual({ bytes: world.full.length, closed: true });
    // Read once more after the container stopped (checked against the whole file): nothing more to add.
    expect(world.follows).toBe(2);
    expect(r.cleanup.verified_absent).toBe(true);
  });

  it("a follow that ended before the engine's copy (the container stopped while it was behind) is completed by a second read, checked against the whole file", async () => {
    // The container finished after the follow began: the engine may have ended the follow early (seen: 89 of 100 MiB).
    const { world, run } = reattachedWorld(150, '2026-12-02T00:00:30Z');
    const r = await run();
    expect(world.follows).toBe(2);
    expect(world.finishedAtRemoval).toBe(true);
    expect(world.files.stdout.text()).toBe(world.full);
    expect(r.logs.stdout).toEqual({ bytes: world.full.length, closed: true });
  });
});
