import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  currentProcessIdentity,
  procHostIdentity,
  readBootId,
  readProcessStartTicks,
} from '../../src/adapters/host-identity.js';
import { writeContinuation } from '../../src/app/batch/continuation.js';
import { batchSpaceWarning } from '../../src/app/batch/output-space.js';
import { checkSources } from '../../src/app/batch/source-check.js';
import { requestStop, stopBatch } from '../../src/app/batch/stop-batch.js';
import { STOP_FILE } from '../../src/core/evidence-names.js';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { RoboguideError } from '../../src/core/errors.js';
import { sha256 } from '../support/finished-pair.js';
import { claimJob, recordSupervisor, startTestBatch, type TestBatch } from '../support/batch-dir.js';
import { clockAt } from '../support/fake-time.js';

let dir: string;
let batch: TestBatch;
const clock = clockAt(() => new Date('2026-12-02T11:00:00Z'));

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-batch-small-'));
  batch = await startTestBatch(dir, { jobs: ['a', 'b', 'c'] });
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function rejection(promise: Promise<unknown>): Promise<RoboguideError> {
  const err: unknown = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(RoboguideError);
  return err as RoboguideError;
}

async function journalFatalPause(): Promise<void> {
  await batch.store.appendJournal({
    type: 'paused',
    at: '2026-12-02T10:05:00.000Z',
    reasons: ['fatal'],
    job_id: 'a',
  });
}

/** A live child process whose identity (pid, start ticks, boot id) a supervisor record can name. */
async function liveChild(): Promise<{
  child: ChildProcess;
  identity: { pid: number; start_ticks: string | null; boot_id: string | null };
}> {
  const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  await once(child, 'spawn');
  const pid = child.pid!;
  return {
    child,
    identity: { pid, start_ticks: await readProcessStartTicks(pid), boot_id: await readBootId() },
  };
}

describe('writeContinuation (`e1-batch continuation`)', () => {
  it('after a fatal pause: the original manifest minus every claimed job, with continuation_of; the batch is not changed', async () => {
    await claimJob(batch, 'a');
    await journalFatalPause();
    const out = join(dir, 'queue-2.json');
    const outcome = await writeContinuation(batch.store, {
      manifestOut: out,
      codeVersion: '1.2.3+abc',
      fs: new NodeFileSystem(),
      host: procHostIdentity,
    });
    expect(outcome).toEqual({ manifest_out: out, batch_id: batch.batchId, jobs: 2, excluded_claimed: 1 });
    const written = JSON.parse(await readFile(out, 'utf8')) as {
      jobs: { job_id: string }[];
      continuation_of: unknown;
      image: string;
    };
    expect(written.jobs.map((j) => j.job_id)).toEqual(['b', 'c']);
    expect(written.continuation_of).toEqual({
      batch_id: batch.batchId,
      output: batch.output,
      code_version: '1.2.3+abc',
    });
    expect(written.image).toBe('roboguide/pair-driver:1');
    expect((await stat(out)).mode & 0o777).toBe(0o600);
  });

  it('refuses a batch without a fatal pause (exit 2), writing nothing', async () => {
    const out = join(dir, 'queue-2.json');
    const err = await rejection(
      writeContinuation(batch.store, {
        manifestOut: out,
        codeVersion: 't',
        fs: new NodeFileSystem(),
        host: procHostIdentity,
      }),
    );
    expect([err.code, err.exitCode]).toEqual(['E_BATCH_STATE', 2]);
    await expect(stat(out)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('refuses while the supervisor is still running', async () => {
    await journalFatalPause();
    await recordSupervisor(batch, await currentProcessIdentity());
    const err = await rejection(
      writeContinuation(batch.store, {
        manifestOut: join(dir, 'q.json'),
        codeVersion: 't',
        fs: new NodeFileSystem(),
        host: procHostIdentity,
      }),
    );
    expect(err.code).toBe('E_SUPERVISOR_ALIVE');
  });

  it('refuses when every job was claimed: nothing to continue', async () => {
    for (const id of ['a', 'b', 'c']) await claimJob(batch, id);
    await journalFatalPause();
    const err = await rejection(
      writeContinuation(batch.store, {
        manifestOut: join(dir, 'q.json'),
        codeVersion: 't',
        fs: new NodeFileSystem(),
        host: procHostIdentity,
      }),
    );
    expect([err.code, err.message]).toEqual([
      'E_BATCH_STATE',
      'every job of the batch was claimed: nothing to continue',
    ]);
  });

  it('never replaces an existing file (exit 2, naming the errno); the file keeps its bytes', async () => {
    await journalFatalPause();
    const out = join(dir, 'exists.json');
    await writeFile(out, 'mine');
    const err = await rejection(
      writeContinuation(batch.store, {
        manifestOut: out,
        codeVersion: 't',
        fs: new NodeFileSystem(),
        host: procHostIdentity,
      }),
    );
    expect([err.code, err.exitCode, err.message]).toEqual(['E_USAGE', 2, `cannot write ${out}: EEXIST`]);
    expect(await readFile(out, 'utf8')).toBe('mine');
  });
});

describe('stopBatch / requestStop (`e1-batch stop`)', () => {
  it('records the stop request atomically; no supervisor: not signalled', async () => {
    expect(await stopBatch(batch.store, clock, true, procHostIdentity)).toEqual({
      signalled: false,
      pid: null,
      terminate: true,
      state: 'stop-requested',
      unfinished: null,
    });
    expect(await batch.store.readJson(STOP_FILE)).toEqual({
      terminate: true,
      requested_at: '2026-12-02T11:00:00.000Z',
    });
  });

  it('a recorded supervisor that is gone (another process now, or none) is not signalled', async () => {
    await recordSupervisor(batch, { pid: process.pid, start_ticks: '1', boot_id: await readBootId() });
    expect(await stopBatch(batch.store, clock, false, procHostIdentity)).toEqual({
      signalled: false,
      pid: null,
      terminate: false,
      state: 'stop-requested',
      unfinished: null,
    });
  });

  it('signals the live supervisor with SIGUSR2', async () => {
    const { child, identity } = await liveChild();
    try {
      await recordSupervisor(batch, identity);
      const exited = once(child, 'exit');
      expect(await stopBatch(batch.store, clock, false, procHostIdentity)).toEqual({
        signalled: true,
        pid: identity.pid,
        terminate: false,
        state: 'stop-requested',
        unfinished: null,
      });
      // The child has no SIGUSR2 handler: the signal's default action ends it, which shows it was sent.
      expect((await exited)[1]).toBe('SIGUSR2');
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('requestStop refuses a folder that is not a batch and writes nothing there; with no supervisor it writes nothing either (issue 40)', async () => {
    const empty = join(dir, 'empty');
    await mkdir(empty);
    const store = new EvidenceStore(new NodeFileSystem(), empty);
    await expect(requestStop(store, clock, false, procHostIdentity)).rejects.toBeInstanceOf(RoboguideError);
    expect(await store.exists(STOP_FILE)).toBe(false);
    expect(await requestStop(batch.store, clock, false, procHostIdentity)).toMatchObject({
      signalled: false,
      state: expect.stringMatching(/^(finished|not-running)$/),
    });
    expect(await batch.store.exists(STOP_FILE)).toBe(false);
  });
});

describe('checkSources (pinned public sources)', () => {
  it('ok when every pinned file has its digest; names the files that differ or cannot be read (never their contents)', async () => {
    const same = join(dir, 'same.py');
    const changed = join(dir, 'changed.py');
    await writeFile(same, 'print(1)\n');
    await writeFile(changed, 'print(2)\n');
    expect(await checkSources(new NodeFileSystem(), {})).toEqual({ ok: true, checked: 0, mismatched: [] });
    expect(await checkSources(new NodeFileSystem(), { [same]: sha256('print(1)\n') })).toEqual({
      ok: true,
      checked: 1,
      mismatched: [],
    });
    const gone = join(dir, 'gone.py');
    const folder = join(dir, 'cwd');
    await mkdir(folder, { recursive: true });
    const pins = {
      [same]: sha256('print(1)\n'),
      [changed]: sha256('print(1)\n'),
      [gone]: sha256(''),
      [folder]: sha256(''),
    };
    expect(await checkSources(new NodeFileSystem(), pins)).toEqual({
      ok: false,
      checked: 4,
      mismatched: [changed, gone, folder],
    });
  });

  it('follows a symlink to the pinned bytes', async () => {
    const real = join(dir, 'real.py');
    await writeFile(real, 'x');
    await symlink(real, join(dir, 'link.py'));
    expect((await checkSources(new NodeFileSystem(), { [join(dir, 'link.py')]: sha256('x') })).ok).toBe(true);
  });
});

describe('batchSpaceWarning (after start froze the manifest)', () => {
  it('null when the output file system has room for every cap; a warning naming the path when it has not', async () => {
    const seen: string[] = [];
    const free = (freeBytes: number) => (path: string) => {
      seen.push(path);
      return Promise.resolve({ path, freeBytes });
    };
    expect(
      await batchSpaceWarning(batch.store, { freeDiskBytes: free(10 * 1024 ** 4), sessionsMaxBytes: 1000 }),
    ).toBeNull();
    const warning = await batchSpaceWarning(batch.store, {
      freeDiskBytes: free(1024 ** 3),
      sessionsMaxBytes: 1000,
    });
    expect(warning).toContain(`the output file system (${batch.output}) has 1.0 GiB free`);
    expect(seen).toEqual([batch.output, batch.output]);
  });
});
