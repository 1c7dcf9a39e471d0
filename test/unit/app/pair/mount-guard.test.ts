import { lstat, mkdir, mkdtemp, readdir, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../../../src/adapters/fs/node-file-system.js';
import { fileOutcomeReader } from '../../../../src/adapters/outcome-reader.js';
import { procHostIdentity } from '../../../../src/adapters/host-identity.js';
import { EvidenceStore } from '../../../../src/app/evidence/evidence-store.js';
import { executePair } from '../../../../src/app/pair/execute-pair.js';
import type { ExecutePairDeps, ExecutePairInput } from '../../../../src/app/pair/execute-pair-types.js';
import { checkFolder, MountRefusedError } from '../../../../src/app/mount-walk.js';
import type {
  ContainerHandle,
  ContainerRuntime,
  ContainerSpec,
} from '../../../../src/app/ports/container-runtime.js';
import type { FileInfo } from '../../../../src/app/ports/file-system.js';
import { silentLogger } from '../../../../src/app/ports/logger.js';
import { fakeTime } from '../../../support/fake-time.js';
import { ScriptedRuntime } from '../../../support/scripted-runtime.js';

const fs = new NodeFileSystem();
let dir: string;
let elsewhere: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-mount-guard-'));
  elsewhere = join(dir, 'elsewhere'); // stands for a host folder a pair must never get
  await mkdir(join(dir, 'D'));
  await mkdir(elsewhere);
  await writeFile(join(elsewhere, 'host-secret'), 'x');
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function refusal(promise: Promise<unknown>): Promise<MountRefusedError> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(MountRefusedError);
  return err as MountRefusedError;
}

describe('checkFolder: a link-free walk from / with lstat', () => {
  it('refuses a symlink at any component, a dangling one included, and never creates through it', async () => {
    await symlink(elsewhere, join(dir, 'link'));
    expect((await refusal(checkFolder(fs, join(dir, 'link', 'cwd'), 'cwd', { create: true }))).rule).toMatch(
      /link is a symbolic link/,
    );
    expect(await readdir(elsewhere)).toEqual(['host-secret']);
    await symlink(join(dir, 'nowhere'), join(dir, 'dangling'));
    expect((await refusal(checkFolder(fs, join(dir, 'dangling'), 'cwd', { create: true }))).rule).toMatch(
      /dangling is a symbolic link/,
    );
    await expect(lstat(join(dir, 'nowhere'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('refuses a file where a folder must be, "..", a relative path, a missing folder when not creating', async () => {
    await writeFile(join(dir, 'file'), 'x');
    expect((await refusal(checkFolder(fs, join(dir, 'file', 'sub'), 'cwd', { create: true }))).rule).toMatch(
      /file is not a folder/,
    );
    expect((await refusal(checkFolder(fs, `${dir}/a/../elsewhere`, 'cwd', { create: true }))).rule).toMatch(
      /".."/,
    );
    expect((await refusal(checkFolder(fs, 'rel/cwd', 'cwd', { create: true }))).rule).toMatch(/not absolute/);
    expect(
      (await refusal(checkFolder(fs, join(dir, 'missing'), 'outcome folder', { create: false }))).rule,
    ).toMatch(/does not exist/);
  });

  it('refuses a component owned by anyone but the expected owners', async () => {
    const own = (await lstat(dir)).uid;
    const err = await refusal(checkFolder(fs, dir, 'cwd', { create: false, owners: [own + 4242] }));
    expect(err.rule).toMatch(/is owned by user \d+, not by root or the supervisor's user/);
    await expect(checkFolder(fs, dir, 'cwd', { create: false, owners: [0, own] })).resolves.toMatchObject({
      path: dir,
    });
  });

  it("makes each missing folder one at a time and returns the link-free path and the folder's identity", async () => {
    const checked = await checkFolder(fs, `${dir}//a/./b/c/`, 'cwd', { create: true });
    expect(checked.path).toBe(join(dir, 'a', 'b', 'c'));
    const info = await lstat(join(dir, 'a', 'b', 'c'), { bigint: true });
    expect(checked.fileId).toBe(`${info.dev}:${info.ino}`);
  });
});

const T0 = '2026-12-03T08:00:00Z';

function deps(runtime: ContainerRuntime): ExecutePairDeps {
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
  };
}

function input(cwd: string, extra: Partial<ExecutePairInput> = {}): ExecutePairInput {
  return {
    store: new EvidenceStore(fs, join(dir, 'D')),
    jobRel: 'jobs/p1',
    batchId: 'batch-1',
    claimId: 'claim-0001',
    job: {
      job_id: 'p1',
      argv: ['/run'],
      cwd,
      outcome_path: join(cwd, 'out', 'o.json'),
      ports: [],
      image: 'img',
    },
    environment: {},
    secrets: [],
    sessionsDir: '/root/.codex/sessions',
    stopBudgetSec: 5,
    bindAddress: '127.0.0.1',
    allowedHttpStatuses: [],
    deadlineMs: Date.parse(T0) + 90_000,
    readOutcome: () => Promise.resolve({ state: 'missing' }),
    ...extra,
  };
}

/** Replaces `path` by a symlink to `target` (the folder itself moved aside), as a hostile neighbour would. */
async function swap(path: string, target: string): Promise<void> {
  await rename(path, `${path}.moved`);
  await symlink(target, path);
}

/** A scripted engine that lets a test act on the host right after create or right after start. */
class SwappingRuntime extends ScriptedRuntime {
  afterCreate: (() => Promise<void>) | null = null;
  afterStart: (() => Promise<void>) | null = null;

  override async create(spec: ContainerSpec): Promise<ContainerHandle> {
    const handle = await super.create(spec);
    await this.afterCreate?.();
    return handle;
  }

  override async start(): Promise<void> {
    await super.start();
    await this.afterStart?.();
  }
}

/** A file system where `alias` is the same folder as `as` (a bind mount): lstat gives it the other folder's identity. */
class BindMountedFs extends NodeFileSystem {
  constructor(
    private readonly alias: string,
    private readonly as: string,
  ) {
    super();
  }

  override async lstat(path: string): Promise<FileInfo> {
    const info = await super.lstat(path);
    return path === this.alias ? { ...info, fileId: (await super.lstat(this.as)).fileId! } : info;
  }
}

describe('executePair: the launch-time mount guard', () => {
  it('a protected folder under another name (a bind mount of /etc, of /): refused by identity, no container', async () => {
    const bound = join(dir, 'bound');
    await mkdir(join(bound, 'work'), { recursive: true });
    for (const [as, cwd, rule] of [
      ['/etc', join(bound, 'work'), /bound is \/etc under another name/],
      ['/', bound, /is \/ under another name/],
    ] as const) {
      const runtime = new ScriptedRuntime();
      const { result } = await executePair(
        { ...deps(runtime), fs: new BindMountedFs(bound, as) },
        input(cwd),
      );
      expect(result.reasons, as).toEqual(['mount_refused', 'outcome_missing']);
      expect(result.engine_error?.message, as).toMatch(rule);
      expect(runtime.calls, as).not.toContain('create');
    }
    // Refused on the way down: nothing was made inside the aliased folder.
    await expect(lstat(join(bound, 'work', 'new'))).rejects.toMatchObject({ code: 'ENOENT' });
    const runtime = new ScriptedRuntime();
    const { result } = await executePair(
      { ...deps(runtime), fs: new BindMountedFs(bound, '/etc') },
      input(join(bound, 'work', 'new', 'deeper')),
    );
    expect(result.reasons[0]).toBe('mount_refused');
    await expect(lstat(join(bound, 'work', 'new'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('gives the engine the checked, link-free path and a cwd made by the guard', async () => {
    const runtime = new ScriptedRuntime();
    const { result } = await executePair(deps(runtime), input(`${dir}/./work//cwd`));
    expect(result.reasons).not.toContain('mount_refused');
    expect(runtime.created?.binds[0]).toMatchObject({
      hostPath: join(dir, 'work', 'cwd'),
      containerPath: `${dir}/./work//cwd`,
    });
    expect((await lstat(join(dir, 'work', 'cwd'))).isDirectory()).toBe(true);
  });

  it('a cwd reached through a link: refused before create, reason mount_refused, nothing made through the link', async () => {
    await symlink(elsewhere, join(dir, 'via'));
    const runtime = new ScriptedRuntime();
    const { result } = await executePair(deps(runtime), input(join(dir, 'via', 'cwd')));
    expect(result).toMatchObject({
      classification: 'infrastructure_failure',
      reasons: ['mount_refused', 'outcome_missing'],
    });
    expect(result.engine_error).toMatchObject({
      kind: 'mount_refused',
      message: expect.stringMatching(/^cwd: .*via is a symbolic link/) as string,
    });
    expect(runtime.calls).not.toContain('create');
    expect(await readdir(elsewhere)).toEqual(['host-secret']);
  });

  it('a cwd outside the --mount-root folders or on a protected real path: refused at launch, no container', async () => {
    await mkdir(join(dir, 'allowed'));
    const runtime = new ScriptedRuntime();
    const { result } = await executePair(
      deps(runtime),
      input(join(dir, 'work'), { mountRules: { mountRoots: [join(dir, 'allowed')] } }),
    );
    expect(result.reasons).toEqual(['mount_refused', 'outcome_missing']);
    expect(result.engine_error?.message).toMatch(/--mount-root/);
    expect(runtime.calls).not.toContain('create');

    const ssh = new ScriptedRuntime();
    const sshRun = await executePair(deps(ssh), input(join(dir, 'work', '.ssh')));
    expect(sshRun.result.reasons).toEqual(['mount_refused', 'outcome_missing']);
    expect(ssh.calls).not.toContain('create');
  });

  it('the cwd swapped for a link between create and start: never started, removed, mount_refused', async () => {
    const cwd = join(dir, 'work');
    const runtime = new SwappingRuntime();
    runtime.afterCreate = () => swap(cwd, elsewhere);
    const { result } = await executePair(deps(runtime), input(cwd));
    expect(result).toMatchObject({
      classification: 'infrastructure_failure',
      reasons: ['mount_refused', 'outcome_missing'],
    });
    expect(result.engine_error?.message).toMatch(/work is a symbolic link/);
    expect(runtime.calls).toContain('create');
    expect(runtime.calls).not.toContain('start');
    expect(runtime.calls).toContain('remove');
    expect(result.cleanup.verified_absent).toBe(true);
  });

  it('the cwd replaced by another folder (no link) between create and start: the identity check refuses it', async () => {
    const cwd = join(dir, 'work');
    const runtime = new SwappingRuntime();
    runtime.afterCreate = async () => {
      await rename(cwd, `${cwd}.moved`);
      await mkdir(cwd);
    };
    const { result } = await executePair(deps(runtime), input(cwd));
    expect(result.reasons).toEqual(['mount_refused', 'outcome_missing']);
    expect(result.engine_error?.message).toMatch(/was replaced while the container was created/);
    expect(runtime.calls).not.toContain('start');
  });

  it('refused after the create and the engine does not confirm the removal: the container is named, cleanup_unverified', async () => {
    const cwd = join(dir, 'work');
    const runtime = new SwappingRuntime();
    runtime.removeTakesNoEffect = true;
    runtime.afterCreate = () => swap(cwd, elsewhere);
    const { result } = await executePair(deps(runtime), input(cwd));
    expect(result).toMatchObject({
      classification: 'harness_failure',
      reasons: ['cleanup_unverified', 'mount_refused', 'outcome_missing'],
    });
    expect(result.container.id).toBe('c1');
    expect(result.cleanup).toMatchObject({ removed: false, verified_absent: false });
    expect(runtime.calls).not.toContain('start');
  });

  it('the cwd swapped while the engine starts it: refused after start, the container removed and verified', async () => {
    const cwd = join(dir, 'work');
    const runtime = new SwappingRuntime();
    runtime.afterStart = () => swap(cwd, elsewhere);
    const { result } = await executePair(deps(runtime), input(cwd));
    expect(result.reasons[0]).toBe('mount_refused');
    expect(result.classification).toBe('infrastructure_failure');
    expect(runtime.calls).toEqual(expect.arrayContaining(['create', 'start', 'remove']));
    expect(result.cleanup.verified_absent).toBe(true);
  });
});
