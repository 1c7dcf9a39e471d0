import { fstatSync, readlinkSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, rename, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';
import { ProcFdMountStager } from '../../src/adapters/mount/proc-fd-stager.js';
import { fileOutcomeReader } from '../../src/adapters/outcome-reader.js';
import { mountModeCheck } from '../../src/app/doctor/run-doctor.js';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { executePair } from '../../src/app/pair/execute-pair.js';
import type { ExecutePairDeps, ExecutePairInput } from '../../src/app/pair/execute-pair-types.js';
import type { ContainerHandle, ContainerSpec } from '../../src/app/ports/container-runtime.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import type { MountStager, OpenedFolder } from '../../src/app/ports/mount-stager.js';
import type { MountMode } from '../../src/core/mount-mode.js';
import { buildReceipt } from '../../src/core/receipt.js';
import { fakeTime } from '../support/fake-time.js';
import { ScriptedRuntime } from '../support/scripted-runtime.js';

/**
 * The staged mode of the launch-time guard (docs/spec.md 5.3), with the real openat steps and a hand-written bind
 * that records the object it was given instead of mounting it: the engine gets the staging point, never the path;
 * the point names the folder that was checked even when the path is a link by the time the engine looks; points go
 * once the container is seen gone, and stay while it is not.
 */

const T0 = '2026-12-04T08:00:00Z';
const fs = new NodeFileSystem();
let dir: string;

/** Real openat steps (the adapter's), a recorded bind, and a record of releases. */
class RecordingStager extends ProcFdMountStager implements MountStager {
  readonly bound = new Map<string, { where: string; id: string }>();
  readonly released: string[] = [];
  readonly settledPoints: string[] = [];
  constructor(private readonly answer: MountMode = 'staged') {
    super({ root: '/nonexistent', referencedSources: () => Promise.resolve(new Set()) });
  }
  override mode(): Promise<MountMode> {
    return Promise.resolve(this.answer);
  }
  override bind(folder: OpenedFolder): Promise<string> {
    const point = `/staged/${this.bound.size + 1}`;
    const s = fstatSync(folder.handle);
    this.bound.set(point, { where: readlinkSync(`/proc/self/fd/${folder.handle}`), id: `${s.dev}:${s.ino}` });
    return Promise.resolve(point);
  }
  override settled(point: string): void {
    this.settledPoints.push(point);
  }
  override release(point: string): Promise<void> {
    this.released.push(point);
    return Promise.resolve();
  }
}

/** Acts on the host right after the engine created the container (before the guard's own check). */
class HookedRuntime extends ScriptedRuntime {
  afterCreate: (() => Promise<void>) | null = null;
  override async create(spec: ContainerSpec): Promise<ContainerHandle> {
    const handle = await super.create(spec);
    await this.afterCreate?.();
    return handle;
  }
}

function deps(runtime: ScriptedRuntime, stager: MountStager): ExecutePairDeps {
  const time = fakeTime(T0);
  return {
    runtime,
    clock: time.clock,
    logger: silentLogger,
    createRedactor: () => new PassThrough(),
    extractSessions: () => Promise.reject(new Error('no sessions archive in these tests')),
    diagnose: () => Promise.resolve(null),
    verifyAbsentTimeoutMs: 300,
    fs,
    host: procHostIdentity,
    outcomes: fileOutcomeReader,
    mountStager: stager,
  };
}

function input(cwd: string): ExecutePairInput {
  return {
    store: new EvidenceStore(fs, join(dir, 'D')),
    jobRel: 'jobs/p1',
    batchId: 'batch-1',
    claimId: 'claim-0001',
    job: { job_id: 'p1', argv: ['/run'], cwd, outcome_path: join(cwd, 'o.json'), ports: [], image: 'img' },
    environment: {},
    secrets: [],
    sessionsDir: '/root/.codex/sessions',
    stopBudgetSec: 5,
    bindAddress: '127.0.0.1',
    allowedHttpStatuses: [],
    deadlineMs: Date.parse(T0) + 90_000,
    readOutcome: () => Promise.resolve({ state: 'missing' }),
  };
}

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-mount-staged-'));
  await mkdir(join(dir, 'D'));
  await mkdir(join(dir, 'elsewhere'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('executePair: staged mounts', () => {
  it('the engine gets the staging point of the checked folder; the point goes once the container is gone', async () => {
    const runtime = new ScriptedRuntime();
    const stager = new RecordingStager();
    const cwd = join(dir, 'work', 'cwd');
    const { result, released } = await executePair(deps(runtime, stager), input(cwd));
    await released;
    expect(result.reasons).not.toContain('mount_refused');
    const cwdBind = runtime.created?.binds.find((b) => b.containerPath === cwd);
    expect(cwdBind?.hostPath).toBe('/staged/1');
    expect(stager.bound.get('/staged/1')?.where).toBe(cwd);
    // The private outcome folder is ours (in the evidence): walked, not staged.
    expect(runtime.created?.binds.filter((b) => b.hostPath.startsWith('/staged/'))).toHaveLength(1);
    expect(stager.settledPoints).toEqual(['/staged/1']);
    expect(result.cleanup.verified_absent).toBe(true);
    expect(stager.released).toEqual(['/staged/1']);
  });

  it('the cwd swapped for a link once staged: the point still names the checked folder (and the guard refuses)', async () => {
    const runtime = new HookedRuntime();
    const stager = new RecordingStager();
    const cwd = join(dir, 'cwd');
    await mkdir(cwd);
    const before = statSync(cwd);
    runtime.afterCreate = async () => {
      await rename(cwd, `${cwd}.moved`);
      await symlink(join(dir, 'elsewhere'), cwd);
    };
    const { result, released } = await executePair(deps(runtime, stager), input(cwd));
    await released;
    const bound = stager.bound.get('/staged/1');
    // The point holds the folder checked (moved aside with its name), never the link's target.
    expect(bound?.id).toBe(`${before.dev}:${before.ino}`);
    const target = statSync(join(dir, 'elsewhere'));
    expect(bound?.id).not.toBe(`${target.dev}:${target.ino}`);
    expect(result.reasons).toEqual(['mount_refused', 'outcome_missing']);
    expect(stager.released).toEqual(['/staged/1']);
  });

  it('a link on the way: refused before anything is bound or created', async () => {
    const runtime = new ScriptedRuntime();
    const stager = new RecordingStager();
    await symlink(join(dir, 'elsewhere'), join(dir, 'via'));
    const { result } = await executePair(deps(runtime, stager), input(join(dir, 'via', 'cwd')));
    expect(result.reasons[0]).toBe('mount_refused');
    expect(result.engine_error?.message).toMatch(/via is a symbolic link/);
    expect(stager.bound.size).toBe(0);
    expect(runtime.calls).not.toContain('create');
  });

  it('a container not seen gone keeps its staging point', async () => {
    const runtime = new ScriptedRuntime();
    runtime.inspects = ['refused'];
    const stager = new RecordingStager();
    const { result, released } = await executePair(deps(runtime, stager), input(join(dir, 'cwd')));
    await released;
    expect(result.cleanup.verified_absent).toBe(false);
    expect(stager.bound.size).toBe(1);
    expect(stager.released).toEqual([]);
  });

  it("the umount runs beside the result's writing: executePair answers before it ends, `released` once it has (issue 39)", async () => {
    const runtime = new ScriptedRuntime();
    let endUmount: () => void = () => undefined;
    const stager = new (class extends RecordingStager {
      override release(point: string): Promise<void> {
        this.released.push(point);
        return new Promise((resolve) => (endUmount = resolve));
      }
    })();
    const executed = await executePair(deps(runtime, stager), input(join(dir, 'work', 'cwd')));
    // The result is whole while the umount still runs.
    expect(executed.result.cleanup.verified_absent).toBe(true);
    expect(stager.released).toEqual(['/staged/1']);
    let done = false;
    void executed.released.then(() => (done = true));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(done).toBe(false);
    endUmount();
    await executed.released;
    expect(done).toBe(true);
  });

  it('walked mode (the host refused the bind): the engine gets the link-free path, nothing is bound', async () => {
    const runtime = new ScriptedRuntime();
    const stager = new RecordingStager('walked');
    const cwd = join(dir, 'cwd');
    await executePair(deps(runtime, stager), input(cwd));
    expect(runtime.created?.binds.find((b) => b.containerPath === cwd)?.hostPath).toBe(cwd);
    expect(stager.bound.size).toBe(0);
  });
});

describe('the mount mode, reported', () => {
  it("doctor's mounts line and the receipt's mount_mode", () => {
    expect(mountModeCheck('staged')).toMatchObject({ name: 'mounts', status: 'ok', detail: /^staged: / });
    expect(mountModeCheck('walked')).toMatchObject({ name: 'mounts', status: 'warn', detail: /^walked: / });
    const receipt = (mountMode?: MountMode) =>
      buildReceipt({
        batchId: 'b',
        jobId: 'j',
        claimId: 'c',
        claimedAt: new Date(T0),
        supervisor: { pid: 1, start_ticks: '1', boot_id: null },
        reservationId: 'r',
        image: 'img',
        outcomePath: '/o.json',
        sourceSha256: {},
        codeVersion: 'v',
        network: 'none',
        runtime: 'runc',
        ...(mountMode !== undefined ? { mountMode } : {}),
      });
    expect(receipt('staged').mount_mode).toBe('staged');
    expect(receipt('walked').mount_mode).toBe('walked');
    expect('mount_mode' in receipt()).toBe(false);
  });
});
