import { PassThrough, Writable, type Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { runPairLifecycle } from '../../../../src/app/pair/pair-lifecycle.js';
import type { LogTarget } from '../../../../src/app/pair/pair-log-types.js';
import type { PairLaunch, PairLifecycleDeps } from '../../../../src/app/pair/pair-lifecycle-types.js';
import type {
  ContainerOutput,
  ContainerState,
  WaitResult,
} from '../../../../src/app/ports/container-runtime.js';
import { silentLogger } from '../../../../src/app/ports/logger.js';
import { EngineError } from '../../../../src/app/ports/engine-error.js';
import { ImageSessionsMemo, type FilesystemChanges } from '../../../../src/core/sessions-skip.js';
import { fakeTime } from '../../../support/fake-time.js';
import { containerSpec, UnscriptedRuntime } from '../../../support/fakes.js';

/** A container that prints one line on each stream and exits 0; removal makes it disappear. */
class FakeRuntime extends UnscriptedRuntime {
  present = false;
  removed = 0;
  output: ContainerOutput = { stdout: new PassThrough(), stderr: new PassThrough() };
  override create() {
    this.present = true;
    return Promise.resolve({ id: 'c1', name: 'n' });
  }
  override attach() {
    return Promise.resolve(this.output);
  }
  override start() {
    this.output.stdout.push('out\n');
    this.output.stderr.push('err\n');
    this.output.stdout.push(null);
    this.output.stderr.push(null);
    return Promise.resolve();
  }
  override wait(
    _id: string,
    _options: { readonly deadlineMs: number; readonly signal?: AbortSignal },
  ): Promise<WaitResult> {
    return Promise.resolve({ kind: 'exited', exitCode: 0 });
  }
  override stop() {
    return Promise.resolve();
  }
  override remove() {
    this.removed++;
    this.present = false;
    return Promise.resolve('removed' as const);
  }
  override inspect(): Promise<ContainerState | null> {
    return Promise.resolve(
      this.present
        ? {
            id: 'c1',
            status: 'exited',
            exitCode: 0,
            oomKilled: false,
            startedAt: null,
            finishedAt: null,
            labels: {},
          }
        : null,
    );
  }
  override getArchive(): Promise<Readable | null> {
    return Promise.resolve(null);
  }
  override listByLabel(): Promise<ContainerState[]> {
    return Promise.resolve(
      this.present
        ? [
            {
              id: 'c1',
              status: 'created',
              exitCode: null,
              oomKilled: false,
              startedAt: null,
              finishedAt: null,
              labels: {},
            },
          ]
        : [],
    );
  }
}

function memoryLog(): LogTarget & { existingBytes: number; text: () => string } {
  const chunks: Buffer[] = [];
  let bytes = 0;
  const stream = new Writable({
    write(chunk: Buffer, _e, done) {
      chunks.push(chunk);
      bytes += chunk.length;
      done();
    },
  });
  return {
    stream,
    existingBytes: 0,
    finish: () => Promise.resolve({ bytes, closed: true, failure: null }),
    text: () => Buffer.concat(chunks).toString(),
  };
}

function deps(runtime: FakeRuntime, overrides: Partial<PairLifecycleDeps> = {}): PairLifecycleDeps {
  // The lifecycle reads only the injected clock; this one moves when the lifecycle sleeps (removal polling).
  const time = fakeTime('2026-12-02T00:00:00Z');
  return {
    runtime: runtime,
    clock: time.clock,
    logger: silentLogger,
    createRedactor: () => new PassThrough(),
    openLogs: () => Promise.resolve({ stdout: memoryLog(), stderr: memoryLog() }),
    readOutcome: () => Promise.resolve({ state: 'missing' }),
    collectSessions: () => Promise.resolve({ files: 0, bytes: 0, refusals: [] }),
    diagnose: () => Promise.resolve(null),
    verifyAbsentTimeoutMs: 300,
    logDrainTimeoutMs: 200,
    ...overrides,
  };
}

const launch: PairLaunch = {
  container: containerSpec(),
  outcomePath: '/x/o.json',
  sessionsDir: '/s',
  deadlineMs: Date.parse('2026-12-02T00:01:00Z'),
  stopBudgetSec: 1,
  secrets: [],
};

describe('runPairLifecycle', () => {
  it('streams both logs, then removes the container and verifies it is gone', async () => {
    const runtime = new FakeRuntime();
    const logs = { stdout: memoryLog(), stderr: memoryLog() };
    const r = await runPairLifecycle(deps(runtime, { openLogs: () => Promise.resolve(logs) }), launch);
    expect(logs.stdout.text()).toBe('out\n');
    expect(logs.stderr.text()).toBe('err\n');
    expect(r.logs).toEqual({ stdout: { bytes: 4, closed: true }, stderr: { bytes: 4, closed: true } });
    expect(r.cleanup).toEqual({ removed: true, verified_absent: true, attempts: 1 });
    expect(r.logFailure).toBeNull();
  });

  it('a log file that cannot be opened is a log failure (harness), not an engine error; the container is still removed', async () => {
    const runtime = new FakeRuntime();
    // The store opens both files or none (the second failing closes the first).
    const openLogs = () =>
      Promise.reject(Object.assign(new Error('disk full'), { context: { errno: 'ENOSPC' } }));
    const r = await runPairLifecycle(deps(runtime, { openLogs }), launch);
    expect(r.logFailure).toBe('open: ENOSPC');
    expect(r.engineFault).toBeNull();
    expect(r.logs.stderr.closed).toBe(false);
    expect(runtime.removed).toBe(1);
    expect(r.cleanup.verified_absent).toBe(true);
  });

  it('a diagnosis that throws and a session collection that throws never skip the removal', async () => {
    const runtime = new FakeRuntime();
    class Boom extends Error {}
    const r = await runPairLifecycle(
      deps(runtime, {
        diagnose: () => Promise.reject(new Boom('secret text')),
        collectSessions: () => Promise.reject(new TypeError('x')),
      }),
      launch,
    );
    expect(r.providerFailureErrorKind).toBe('Boom');
    expect(r.sessions.refusals).toEqual(['collection failed: TypeError']);
    expect(runtime.removed).toBe(1);
    expect(r.cleanup.verified_absent).toBe(true);
  });

  it('a create that timed out but happened anyway is found by its claim label and removed', async () => {
    const runtime = new FakeRuntime();
    runtime.create = () => {
      runtime.present = true; // the engine made it; the answer never came back
      return Promise.reject(
        new EngineError('engine_error', 'timed out', {
          statusCode: null,
          engineMessage: 'timed out: create a container',
        }),
      );
    };
    const withClaim: PairLaunch = {
      ...launch,
      container: containerSpec({ labels: { 'roboguide.claim': 'claim-1' } }),
    };
    const r = await runPairLifecycle(deps(runtime), withClaim);
    expect(r.engineFault).toBe('engine_error');
    expect(r.container.id).toBe('c1');
    expect(runtime.removed).toBe(1);
    expect(r.cleanup.verified_absent).toBe(true);
  });

  it('a removal that does not take effect is reported unverified after its attempts', async () => {
    const runtime = new FakeRuntime();
    runtime.remove = () => Promise.resolve('removed' as const); // the container stays
    const r = await runPairLifecycle(deps(runtime), launch);
    expect(r.cleanup).toEqual({ removed: true, verified_absent: false, attempts: 3 });
  });

  describe('a log that halts', () => {
    /** A container that runs until it is stopped (or the wait is aborted). */
    function runningUntilStopped(): FakeRuntime & { stops: number } {
      const runtime = Object.assign(new FakeRuntime(), { stops: 0 });
      runtime.start = () => Promise.resolve();
      runtime.wait = (_id, opts) =>
        new Promise((resolve) => {
          if (opts.signal?.aborted) resolve({ kind: 'aborted' });
          opts.signal?.addEventListener('abort', () => resolve({ kind: 'aborted' }));
        });
      runtime.stop = () => {
        runtime.stops++;
        runtime.output.stdout.push(null);
        runtime.output.stderr.push(null);
        return Promise.resolve();
      };
      return runtime;
    }
    const halting = (why: 'limit_exceeded' | 'write_failed') => () => {
      const log = memoryLog();
      return Promise.resolve({
        stdout: {
          ...log,
          halted: Promise.resolve(why),
          finish: () =>
            Promise.resolve({
              bytes: 9,
              closed: true,
              failure: null,
              limitExceeded: why === 'limit_exceeded',
            }),
        },
        stderr: memoryLog(),
      });
    };

    it('at its cap: the pair gets the controlled stop, is not called terminated, and the stream is named', async () => {
      const runtime = runningUntilStopped();
      const r = await runPairLifecycle(deps(runtime, { openLogs: halting('limit_exceeded') }), launch);
      expect(runtime.stops).toBeGreaterThanOrEqual(1);
      expect(r.logLimitExceeded).toBe('stdout');
      expect(r.terminated).toBe(false);
      expect(r.timedOut).toBe(false);
      expect(r.logs.stdout).toEqual({ bytes: 9, closed: true, limit_exceeded: true });
      expect(r.cleanup.verified_absent).toBe(true);
    });

    it('after a failed write: stopped too, with no limit reason', async () => {
      const runtime = runningUntilStopped();
      const r = await runPairLifecycle(deps(runtime, { openLogs: halting('write_failed') }), launch);
      expect(runtime.stops).toBeGreaterThanOrEqual(1);
      expect(r.logLimitExceeded).toBeNull();
      expect(r.terminated).toBe(false);
    });
  });

  it('reattached after its deadline to a container that exited within it: not a timeout (found by the crash tests)', async () => {
    const runtime = new FakeRuntime();
    runtime.present = true;
    const exitedAt = '2026-12-02T00:00:30Z';
    runtime.inspect = () =>
      Promise.resolve(
        runtime.present
          ? {
              id: 'c1',
              status: 'exited' as const,
              exitCode: 0,
              oomKilled: false,
              startedAt: '2026-12-02T00:00:01Z',
              finishedAt: exitedAt,
              labels: {},
            }
          : null,
      );
    // The real wait races the engine's answer against a deadline already past: the deadline wins.
    runtime.wait = () => Promise.resolve({ kind: 'deadline' });
    let stops = 0;
    runtime.stop = () => {
      stops++;
      return Promise.resolve();
    };
    const follow = () => {
      const out = { stdout: new PassThrough(), stderr: new PassThrough() };
      out.stdout.end();
      out.stderr.end();
      return Promise.resolve(out);
    };
    Object.assign(runtime, { follow });
    const reattach = {
      ...launch,
      reattach: { containerId: 'c1', claimedAtMs: Date.parse('2026-12-02T00:00:00Z') },
      deadlineMs: Date.parse('2026-12-02T00:01:00Z'),
    } as PairLaunch;
    const r = await runPairLifecycle(deps(runtime), reattach);
    expect(r.timedOut).toBe(false);
    expect(r.container.exit_code).toBe(0);
    expect(stops).toBe(0);
  });

  describe('the sessions copy, skipped only when it could hold nothing', () => {
    const sessionsLaunch = { ...launch, sessionsDir: '/root/.codex/sessions' } as PairLaunch;
    function withChanges(changes: FilesystemChanges | (() => Promise<FilesystemChanges | null>)) {
      const runtime = new FakeRuntime();
      let archives = 0;
      runtime.getArchive = () => {
        archives++;
        return Promise.resolve(new PassThrough().end());
      };
      Object.assign(runtime, {
        filesystemChanges: typeof changes === 'function' ? changes : () => Promise.resolve(changes),
        linkFreePath: () => Promise.resolve(true),
      });
      const collected: unknown[] = [];
      const collectSessions = (archive: unknown) => {
        collected.push(archive === null || archive === 'empty' ? archive : 'archive');
        return Promise.resolve({ files: 0, bytes: 0, refusals: [], nothingInside: true });
      };
      return { runtime, archives: () => archives, collected, collectSessions };
    }
    const untouched: FilesystemChanges = {
      imageId: 'sha256:img',
      changed: ['/tmp', '/tmp/x', '/root/.codexx'],
      mounts: ['/work'],
    };

    it('copies the first pair of an image, then skips an untouched dir the image holds empty', async () => {
      const memo = new ImageSessionsMemo();
      const first = withChanges(untouched);
      await runPairLifecycle(
        deps(first.runtime, { imageSessions: memo, collectSessions: first.collectSessions }),
        sessionsLaunch,
      );
      expect(first.archives()).toBe(1);
      const second = withChanges(untouched);
      const r = await runPairLifecycle(
        deps(second.runtime, { imageSessions: memo, collectSessions: second.collectSessions }),
        sessionsLaunch,
      );
      expect(second.archives()).toBe(0);
      expect(second.collected).toEqual(['empty']); // the sessions folder is still made, as after a copy
      expect(r.sessions).toEqual({ files: 0, bytes: 0, refusals: [] });
      expect(second.runtime.removed).toBe(1);
      expect(r.cleanup.verified_absent).toBe(true);
    });

    it('copies a dir the container wrote in, at or under it or above it, or reached through a mount, whatever the image holds', async () => {
      for (const changes of [
        {
          ...untouched,
          changed: ['/root', '/root/.codex', '/root/.codex/sessions', '/root/.codex/sessions/2026/x.jsonl'],
        },
        { ...untouched, changed: ['/root/.codex/sessions/2026/12/02/late.jsonl'] },
        { ...untouched, changed: ['/root/.codex'] }, // replaced by a link, or deleted
        { ...untouched, mounts: ['/root/.codex'] },
        { ...untouched, mounts: ['/root/.codex/sessions/2026'] },
        { ...untouched, mounts: ['/'] },
      ]) {
        const memo = new ImageSessionsMemo();
        memo.learn('sha256:img', '/root/.codex/sessions', 'empty');
        const pair = withChanges(changes);
        await runPairLifecycle(
          deps(pair.runtime, { imageSessions: memo, collectSessions: pair.collectSessions }),
          sessionsLaunch,
        );
        expect(pair.archives(), JSON.stringify(changes)).toBe(1);
        expect(pair.collected).toEqual(['archive']);
      }
    });

    it('copies when the changes cannot be read, for another image, and after an engine fault', async () => {
      const memo = new ImageSessionsMemo();
      memo.learn('sha256:img', '/root/.codex/sessions', 'empty');
      const unreadable = withChanges(() =>
        Promise.reject(new EngineError('engine_error', 'x', { statusCode: 500, engineMessage: 'x' })),
      );
      await runPairLifecycle(
        deps(unreadable.runtime, { imageSessions: memo, collectSessions: unreadable.collectSessions }),
        sessionsLaunch,
      );
      expect(unreadable.archives()).toBe(1);
      const other = withChanges({ ...untouched, imageId: 'sha256:other' });
      await runPairLifecycle(
        deps(other.runtime, { imageSessions: memo, collectSessions: other.collectSessions }),
        sessionsLaunch,
      );
      expect(other.archives()).toBe(1);
      const faulted = withChanges(untouched);
      faulted.runtime.wait = () =>
        Promise.reject(new EngineError('engine_error', 'boom', { statusCode: 500, engineMessage: 'boom' }));
      await runPairLifecycle(
        deps(faulted.runtime, { imageSessions: memo, collectSessions: faulted.collectSessions }),
        sessionsLaunch,
      );
      expect(faulted.archives()).toBe(1);
    });

    it('never learns through a link: an image whose sessions dir (or a folder above it) is a symbolic link is always copied', async () => {
      // The changes list names where a write landed (/data/codex/…), not the link the pair wrote through
      // (/root/.codex → /data/codex): the dir looks untouched. What the image holds there is therefore never
      // learned, so such a pair's sessions are always copied out.
      const memo = new ImageSessionsMemo();
      const linked = withChanges(untouched);
      const asked: string[] = [];
      Object.assign(linked.runtime, {
        linkFreePath: (_id: string, path: string) => {
          asked.push(path);
          return Promise.resolve(false);
        },
      });
      await runPairLifecycle(
        deps(linked.runtime, { imageSessions: memo, collectSessions: linked.collectSessions }),
        sessionsLaunch,
      );
      expect(asked).toEqual(['/root/.codex/sessions']);
      expect(memo.get('sha256:img', '/root/.codex/sessions')).toBeUndefined();
      const throughLink = withChanges({
        ...untouched,
        changed: ['/data', '/data/codex', '/data/codex/sessions', '/data/codex/sessions/x.jsonl'],
      });
      Object.assign(throughLink.runtime, { linkFreePath: () => Promise.resolve(false) }); // the same image
      await runPairLifecycle(
        deps(throughLink.runtime, { imageSessions: memo, collectSessions: throughLink.collectSessions }),
        sessionsLaunch,
      );
      expect(throughLink.archives()).toBe(1);
      expect(memo.get('sha256:img', '/root/.codex/sessions')).toBeUndefined();
      // A runtime that cannot tell (no linkFreePath, or it fails) never learns either.
      const unknowing = withChanges(untouched);
      Object.assign(unknowing.runtime, { linkFreePath: () => Promise.reject(new Error('engine gone')) });
      await runPairLifecycle(
        deps(unknowing.runtime, { imageSessions: memo, collectSessions: unknowing.collectSessions }),
        sessionsLaunch,
      );
      expect(memo.get('sha256:img', '/root/.codex/sessions')).toBeUndefined();
    });

    it('learns a dir the image lacks (null archive) and skips it as missing; never learns from a copy that held something', async () => {
      const memo = new ImageSessionsMemo();
      const absent = withChanges(untouched);
      absent.runtime.getArchive = () => Promise.resolve(null);
      await runPairLifecycle(
        deps(absent.runtime, { imageSessions: memo, collectSessions: absent.collectSessions }),
        sessionsLaunch,
      );
      expect(memo.get('sha256:img', '/root/.codex/sessions')).toBe('absent');
      const next = withChanges(untouched);
      await runPairLifecycle(
        deps(next.runtime, { imageSessions: memo, collectSessions: next.collectSessions }),
        sessionsLaunch,
      );
      expect(next.archives()).toBe(0);
      expect(next.collected).toEqual([null]);

      const baked = new ImageSessionsMemo();
      const withFiles = withChanges(untouched);
      const collectSessions = () =>
        Promise.resolve({ files: 1, bytes: 9, refusals: [], nothingInside: false });
      await runPairLifecycle(
        deps(withFiles.runtime, { imageSessions: baked, collectSessions }),
        sessionsLaunch,
      );
      expect(baked.get('sha256:img', '/root/.codex/sessions')).toBeUndefined();
    });
  });
});

describe('start errors at the attach, and GPU requests the engine dropped (issue 28)', () => {
  const gpuLaunch: PairLaunch = {
    ...launch,
    container: containerSpec({ deviceRequests: [{ Driver: 'nvidia', Count: -1, Capabilities: [['gpu']] }] }),
  };

  it('a taken port refused at the attach (Podman: 409 address already in use) is the start error Docker gives: port_allocated, empty logs closed, no start', async () => {
    const runtime = new FakeRuntime();
    let started = 0;
    runtime.attach = () =>
      Promise.reject(
        new EngineError('port_allocated', 'a published port is already in use', {
          statusCode: 409,
          engineMessage: 'rootlessport listen tcp 127.0.0.1:18080: bind: address already in use',
        }),
      );
    runtime.start = () => {
      started++;
      return Promise.resolve();
    };
    const r = await runPairLifecycle(deps(runtime), launch);
    expect(r.engineFault).toBe('port_allocated');
    expect(r.engineError).toMatchObject({
      kind: 'port_allocated',
      message: expect.stringContaining('address already in use'),
    });
    expect(r.logFailure).toBeNull();
    expect(r.logs).toEqual({ stdout: { bytes: 0, closed: true }, stderr: { bytes: 0, closed: true } });
    expect(started).toBe(0);
    expect(r.cleanup).toMatchObject({ removed: true, verified_absent: true });
  });

  it("a lost engine at the attach is still the machine's to probe (not taken for a start error)", async () => {
    const runtime = new FakeRuntime();
    runtime.attach = () =>
      Promise.reject(
        new EngineError('engine_unavailable', 'gone', { statusCode: null, engineMessage: 'ECONNREFUSED' }),
      );
    const r = await runPairLifecycle(deps(runtime), launch);
    expect(r.engineFault).not.toBe('port_allocated');
    expect(r.cleanup.verified_absent).toBe(true);
  });

  it('a GPU request the created container does not hold fails with gpu_request_dropped before the driver starts', async () => {
    const runtime = new FakeRuntime() as FakeRuntime & {
      gpuGrantOf: () => Promise<{ deviceRequests: number; cdiDevices: number }>;
    };
    let started = 0;
    let attached = 0;
    runtime.gpuGrantOf = () => Promise.resolve({ deviceRequests: 0, cdiDevices: 0 });
    runtime.attach = () => {
      attached++; // an attach to a container that never starts does not end on Podman
      return Promise.resolve(runtime.output);
    };
    runtime.start = () => {
      started++;
      return Promise.resolve();
    };
    const r = await runPairLifecycle(deps(runtime), gpuLaunch);
    expect(started).toBe(0);
    expect(attached).toBe(0);
    expect(r.logs).toEqual({ stdout: { bytes: 0, closed: true }, stderr: { bytes: 0, closed: true } });
    expect(r.engineFault).toBe('gpu_request_dropped');
    expect(r.engineError?.message).toMatch(/holds none.*docs\/podman\.md/);
    expect(r.logFailure).toBeNull();
    expect(r.cleanup).toMatchObject({ removed: true, verified_absent: true });
  });

  it('a GPU request the container holds (DeviceRequests, or CDI devices) starts as usual', async () => {
    for (const grant of [
      { deviceRequests: 1, cdiDevices: 0 },
      { deviceRequests: 0, cdiDevices: 2 },
    ]) {
      const runtime = new FakeRuntime() as FakeRuntime & { gpuGrantOf: () => Promise<typeof grant> };
      runtime.gpuGrantOf = () => Promise.resolve(grant);
      const r = await runPairLifecycle(deps(runtime), gpuLaunch);
      expect(r.engineFault).toBeNull();
      expect(r.container.exit_code).toBe(0);
    }
  });

  it('a pair without GPUs is never asked about a grant', async () => {
    const runtime = new FakeRuntime() as FakeRuntime & { gpuGrantOf: () => Promise<never> };
    runtime.gpuGrantOf = () => Promise.reject(new Error('must not be called'));
    const r = await runPairLifecycle(deps(runtime), launch);
    expect(r.engineFault).toBeNull();
  });
});
