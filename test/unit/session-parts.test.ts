import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { systemClock } from '../../src/adapters/system-clock.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import type { ReleaseResult } from '../../src/app/ports/capacity-registry.js';
import { releaseSlot } from '../../src/app/serve/session-deletion.js';
import type { ContainerEngine, ContainerState, ExecHandle } from '../../src/app/ports/container-runtime.js';
import { describeRemovalFailure, verifiedRemoval } from '../../src/app/pair/remove-and-verify.js';
import { engineError } from '../support/scripted-runtime.js';
import { execResult, notStartedWords, runExec, type ExecRun } from '../../src/app/serve/session-exec.js';
import {
  adoptedRecord,
  sessionInfo,
  type Session,
  type SessionRecord,
} from '../../src/app/serve/session-state.js';
import { fakeOf, fakeRegistry } from '../support/fakes.js';

/** Only the removal calls of the shared engine port; each can be made to fail. Records what it was asked. */
function removalEngine(
  options: {
    stop?: Error;
    remove?: Error;
    /** The answer of the n-th inspect (from 1); default: a running container first, then the engine's 404. */
    inspect?: (call: number) => Promise<ContainerState | null>;
  } = {},
) {
  const calls: string[] = [];
  let inspections = 0;
  const engine = {
    stop: (id: string) => (
      calls.push(`stop ${id}`),
      options.stop ? Promise.reject(options.stop) : Promise.resolve()
    ),
    remove: (id: string) => (
      calls.push(`remove ${id}`),
      options.remove ? Promise.reject(options.remove) : Promise.resolve('removed' as const)
    ),
    inspect: (id: string) => (
      calls.push(`inspect ${id}`),
      options.inspect
        ? options.inspect(++inspections)
        : Promise.resolve(++inspections === 1 ? running(id) : null)
    ),
  } satisfies Pick<ContainerEngine, 'inspect' | 'stop' | 'remove'>;
  return { engine, calls };
}

function running(id: string): ContainerState {
  return {
    id,
    status: 'running',
    exitCode: null,
    oomKilled: false,
    startedAt: null,
    finishedAt: null,
    labels: {},
  };
}

const RECORD: SessionRecord = adoptedRecord(
  null,
  { sessionId: 's-1', claimId: 'claim-1', reservationId: 'r-1' },
  'c1',
);

const noPause = (): Promise<void> => Promise.resolve();

describe('verifiedRemoval (the one removal of pairs and sessions)', () => {
  it('a running container: stopped, removed, then the 404', async () => {
    const { engine, calls } = removalEngine();
    expect(
      await verifiedRemoval({ runtime: engine, logger: silentLogger, clock: { sleep: noPause } }, 'c1', 5),
    ).toEqual({
      stopped: true,
      removed: true,
      verified_absent: true,
      attempts: 1,
      failure: null,
    });
    expect(calls).toEqual(['inspect c1', 'stop c1', 'remove c1', 'inspect c1']);
  });

  it('a removal refused but the engine saying 404: verified, the failure kept with its fault', async () => {
    const { engine, calls } = removalEngine({
      remove: engineError('engine_error', 409, 'removal in progress'),
    });
    const removal = await verifiedRemoval(
      { runtime: engine, logger: silentLogger, clock: { sleep: noPause } },
      'c1',
      5,
    );
    expect(removal).toEqual({
      stopped: true,
      removed: false,
      verified_absent: true,
      attempts: 1,
      failure: { step: 'remove', fault: 'engine_error', message: 'removal in progress' },
    });
    expect(calls).toEqual(['inspect c1', 'stop c1', 'remove c1', 'inspect c1']);
    expect(describeRemovalFailure(removal.failure)).toBe('remove: engine_error: removal in progress');
  });

  it('a stop that fails: no removal in that round; the next round finds it exited and removes it', async () => {
    const { engine, calls } = removalEngine({
      stop: engineError('engine_unavailable', null, 'connect ECONNREFUSED'),
      inspect: (n) =>
        Promise.resolve(n <= 2 ? running('c1') : n === 3 ? { ...running('c1'), status: 'exited' } : null),
    });
    const removal = await verifiedRemoval(
      { runtime: engine, logger: silentLogger, verifyAbsentTimeoutMs: 300, clock: { sleep: noPause } },
      'c1',
      5,
    );
    expect(removal).toEqual({
      stopped: true,
      removed: true,
      verified_absent: true,
      attempts: 2,
      failure: { step: 'stop', fault: 'engine_unavailable', message: 'connect ECONNREFUSED' },
    });
    expect(calls).toEqual(['inspect c1', 'stop c1', 'inspect c1', 'inspect c1', 'remove c1', 'inspect c1']);
  });

  it("an inspect that fails, then a 404: polled through, verified, the failure typed as not the engine's", async () => {
    const { engine } = removalEngine({
      inspect: (n) =>
        n === 1
          ? Promise.resolve(running('c1'))
          : n === 2
            ? Promise.reject(new Error('socket hang up'))
            : Promise.resolve(null),
    });
    expect(
      await verifiedRemoval({ runtime: engine, logger: silentLogger, clock: { sleep: noPause } }, 'c1', 5),
    ).toMatchObject({
      verified_absent: true,
      failure: { step: 'verify', fault: null, message: 'socket hang up' },
    });
  });

  it('a container that never goes: three removals, a bounded number of inspects, unverified', async () => {
    const { engine, calls } = removalEngine({
      inspect: (n) => Promise.resolve(running(`c${n > 0 ? 1 : 0}`)),
    });
    let pauses = 0;
    const removal = await verifiedRemoval(
      {
        runtime: engine,
        logger: silentLogger,
        verifyAbsentTimeoutMs: 900,
        clock: { sleep: () => (pauses++, noPause()) },
      },
      'c1',
      5,
    );
    expect(removal).toMatchObject({ verified_absent: false, attempts: 3, removed: true });
    expect(calls.filter((c) => c === 'remove c1')).toHaveLength(3);
    // 900 ms over 3 attempts, 100 ms apart: 3 looks after each removal.
    expect(pauses).toBe(9);
  });
});

describe('releaseSlot', () => {
  const registry = (result: ReleaseResult) => fakeRegistry({ release: () => Promise.resolve(result) });
  it.each([
    [{ kind: 'released' } as const, { released: true, error: null }],
    [{ kind: 'already_released' } as const, { released: true, error: null }],
    [
      { kind: 'refused', reason: 'not_held_by_claim' } as const,
      { released: false, error: 'slot: not_held_by_claim' },
    ],
  ])('%o → %o', async (result, expected) => {
    expect(await releaseSlot(registry(result), RECORD)).toEqual(expected);
  });
});

/** An exec whose streams the test writes; killTree ends them (as the engine does when the tree dies). */
function fakeExec() {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let kills = 0;
  let exit!: (code: number | null) => void;
  const done = new Promise<number | null>((resolve) => (exit = resolve));
  const handle: ExecHandle = {
    stdout,
    stderr,
    done,
    killTree: () => {
      kills += 1;
      stdout.end();
      stderr.end();
      exit(137);
      return Promise.resolve();
    },
    abandon: () => undefined,
  };
  return { handle, stdout, stderr, exit, kills: () => kills };
}

const run = (handle: ExecHandle, overrides: Partial<ExecRun> = {}): ExecRun => ({
  handle,
  secrets: [],
  createRedactor: () => new PassThrough(),
  maxOutputBytes: 8,
  timeoutSec: undefined,
  logger: silentLogger,
  sessionId: 's-1',
  clock: systemClock,
  ...overrides,
});

describe('runExec', () => {
  it('backpressure: output is not read while the observer waits; a kill releases the wait and drops the rest', async () => {
    const exec = fakeExec();
    const seen: string[] = [];
    let release: () => void = () => undefined;
    let waitingSignal: AbortSignal | null = null;
    const controller = new AbortController();
    const observer = {
      onOutput: (_name: 'stdout' | 'stderr', text: string, stopped: AbortSignal) => {
        seen.push(text);
        waitingSignal = stopped;
        // The client's socket is full: wait until it drains, or until the exec is killed.
        return new Promise<void>((resolve) => {
          release = resolve;
          stopped.addEventListener('abort', () => resolve(), { once: true });
        });
      },
    };
    const pending = runExec(run(exec.handle, { observer, signal: controller.signal }));
    exec.stdout.write('first');
    await new Promise((r) => setTimeout(r, 20));
    // While the observer waits, nothing more reaches it (the pipe from the exec pauses at its high-water marks).
    for (let i = 0; i < 20; i++) exec.stdout.write(Buffer.alloc(4096, 97));
    await new Promise((r) => setTimeout(r, 20));
    expect(seen).toEqual(['first']);
    release();
    await new Promise((r) => setTimeout(r, 20));
    expect(seen.length).toBeGreaterThan(1);
    controller.abort('slow_reader');
    expect(waitingSignal!.aborted).toBe(true);
    const outcome = await pending;
    expect(exec.kills()).toBe(1);
    expect(outcome.stoppedFor).toBe('slow_reader');
  });

  it('a command the runtime never started: its error (engine internals, a host path) is said in our words, the code kept (issue 39)', async () => {
    const runtimeError =
      'OCI runtime exec failed: exec failed: unable to start container process: unable to find user 0: read /var/lib/docker/overlay2/0a1b/merged/etc/passwd: is a directory: unknown\r\n';
    const exec = fakeExec();
    const handle = { ...exec.handle, started: exec.handle.done.then(() => false) };
    const pending = runExec(run(handle, { maxOutputBytes: 4096 }));
    exec.stdout.end(runtimeError);
    exec.stderr.end();
    exec.exit(126);
    const outcome = await pending;
    expect(outcome.code).toBe(126);
    expect(outcome.stdout).toEqual({ text: '', bytes: 0 });
    expect(outcome.stderr.text).toBe(
      'roboguide-eval: the command was not started: its user "0" could not be looked up in the container (its /etc/passwd or /etc/group has no such entry, or is not a readable file)\n',
    );
    expect(JSON.stringify(outcome)).not.toMatch(/overlay2|OCI|var\/lib/);
    // Each kind of runtime error, and a command that started and failed on its own: left as it is.
    // Inspect's sandbox check: an unknown user is named in the output.
    expect(
      notStartedWords('unable to find user nonexistent: no matching entries in passwd file').text,
    ).toContain('user "nonexistent" could not be looked up');
    expect(notStartedWords('chdir to cwd ("/nope") set in config.json failed').text).toMatch(
      /working directory \(cwd\)/,
    );
    expect(notStartedWords('exec: "nope": executable file not found in $PATH').text).toMatch(
      /executable was not found/,
    );
    expect(notStartedWords('exec: "/x": permission denied').text).toMatch(/permission denied/);
    // Inspect's sandbox check runs /etc/passwd: a permission fault, not a user lookup (its adapter raises PermissionError).
    expect(
      notStartedWords('unable to start container process: exec: "/etc/passwd": permission denied: unknown')
        .text,
    ).toMatch(/permission denied/);
    const ownExit = fakeExec();
    const own = runExec(
      run({ ...ownExit.handle, started: ownExit.handle.done.then(() => true) }, { maxOutputBytes: 4096 }),
    );
    ownExit.stdout.end('OCI runtime exec failed: printed by the command\n');
    ownExit.stderr.end();
    ownExit.exit(126);
    expect((await own).stdout.text).toBe('OCI runtime exec failed: printed by the command\n');
    // The engine's own words for a user it could not look up (no runtime prefix), a host path in them.
    const lookup = fakeExec();
    const looked = runExec(
      run({ ...lookup.handle, started: lookup.handle.done.then(() => false) }, { maxOutputBytes: 4096 }),
    );
    lookup.stdout.end(
      'unable to find user 0: read /var/lib/docker/overlay2/0a1b/merged/etc/passwd: is a directory\r\n',
    );
    lookup.stderr.end();
    lookup.exit(126);
    expect(JSON.stringify(await looked)).not.toMatch(/overlay2|var\/lib/);
    // Podman reports pid 0 for every exec that ended: without the runtime's words, the output is the command's.
    const podman = fakeExec();
    const ended = runExec(
      run({ ...podman.handle, started: podman.handle.done.then(() => false) }, { maxOutputBytes: 4096 }),
    );
    podman.stdout.end('sh: nope: not found\n');
    podman.stderr.end();
    podman.exit(127);
    expect((await ended).stdout.text).toBe('sh: nope: not found\n');
  });

  it("keeps each stream up to the cap's byte and says truncated past it; a character the cap cuts is left out", async () => {
    const exec = fakeExec();
    const pending = runExec(run(exec.handle));
    exec.stdout.end('12345');
    exec.stderr.write('abcdef');
    await new Promise((r) => setImmediate(r)); // read as its own chunk: the cap cuts the one that crosses it
    exec.stderr.end('ghijkl');
    exec.exit(0);
    const outcome = await pending;
    expect(outcome).toEqual({
      stdout: { text: '12345', bytes: 5 },
      stderr: { text: 'abcdefgh', bytes: 12 },
      code: 0,
      timedOut: false,
      truncated: true,
      stoppedFor: null,
    });
    expect(execResult(outcome, 1.23456)).toEqual({
      stdout: '12345',
      stderr: 'abcdefgh',
      return_code: 0,
      timed_out: false,
      duration_ms: 1.235,
      truncated: true,
      interrupted: null,
    });
    // The cap (8 bytes) falls inside "€" (bytes 7 to 9): the 7 whole characters before it, no U+FFFD.
    const cut = fakeExec();
    const cutPending = runExec(run(cut.handle));
    cut.stdout.end('abcdefg€xyz');
    cut.stderr.end();
    cut.exit(0);
    expect((await cutPending).stdout).toEqual({ text: 'abcdefg', bytes: 13 });
  });

  it('streams to an observer instead (no cap); an unfinished UTF-8 character is flushed at the end', async () => {
    const exec = fakeExec();
    const seen: string[] = [];
    const pending = runExec(
      run(exec.handle, {
        observer: {
          onOutput: (name, text) => {
            seen.push(`${name}:${text}`);
          },
        },
      }),
    );
    const euro = Buffer.from('€');
    exec.stdout.write(Buffer.from('0123456789'));
    exec.stdout.end(euro.subarray(0, 2));
    exec.stderr.end();
    exec.exit(3);
    const outcome = await pending;
    expect(seen).toEqual(['stdout:0123456789', `stdout:${'\ufffd'}`]);
    expect(outcome.stdout).toEqual({ text: '', bytes: 12 });
    expect(outcome.truncated).toBe(false);
  });

  it('a timeout kills the tree once: timed out, return code 124', async () => {
    const exec = fakeExec();
    const outcome = await runExec(run(exec.handle, { timeoutSec: 0.01 }));
    expect(outcome.timedOut).toBe(true);
    expect(exec.kills()).toBe(1);
    expect(execResult(outcome, 10).return_code).toBe(124);
  });

  it('the client going away (abort) kills the tree; not a timeout; no exit code → -1', async () => {
    const exec = fakeExec();
    const abort = new AbortController();
    const pending = runExec(run(exec.handle, { signal: abort.signal }));
    abort.abort();
    const outcome = await pending;
    expect(exec.kills()).toBe(1);
    expect(outcome.timedOut).toBe(false);
    expect(execResult({ ...outcome, code: null }, 1).return_code).toBe(-1);
  });
});

describe('session records', () => {
  it('a container found without session.json gets a record from its labels, already expired', () => {
    expect(RECORD).toMatchObject({
      session_id: 's-1',
      claim_id: 'claim-1',
      reservation_id: 'r-1',
      container_id: 'c1',
      expires_at: new Date(0).toISOString(),
    });
    const stored = { ...RECORD, image: 'img:1', container_id: null };
    expect(adoptedRecord(stored, { sessionId: 'x', claimId: 'y', reservationId: 'z' }, 'c9')).toEqual({
      ...stored,
      container_id: 'c9',
    });
  });

  it('lists a session with its in-memory expiry', () => {
    const session = fakeOf<Session & { state: 'deleting' }>('Session', {
      record: { ...RECORD, labels: { team: 'a' } },
      expiresAtMs: 60_000,
      state: 'deleting',
    });
    expect(sessionInfo(session)).toEqual({
      session_id: 's-1',
      container_id: 'c1',
      image: '',
      state: 'deleting',
      created_at: '',
      expires_at: '1970-01-01T00:01:00.000Z',
      labels: { team: 'a' },
    });
  });
});
