import { mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import type { StartBatchOptions } from '../../src/app/batch/start-batch-types.js';
import { jobPathIssues } from '../../src/app/job-paths.js';
import { runPair } from '../../src/app/pair/run-pair.js';
import type { RunPairDeps } from '../../src/app/pair/run-pair-types.js';
import { bindAddressProblem } from '../../src/core/bind-address.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';
import { answeringEngine, fakeRegistry, runPairDeps } from '../support/fakes.js';
import { clockAt } from '../support/fake-time.js';

/**
 * Every refusal of `e1-batch start` / `pair run` input (issue: bad input fails fast, exit 2, nothing written):
 * each test checks the error names the field and that the folder holds exactly what it held before.
 */
const engine = answeringEngine();
const clock = clockAt(() => new Date('2026-12-02T10:00:00Z'));
const fs = new NodeFileSystem();
let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-refusals-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Every path under `root`, sorted: compared before and after a refusal. */
async function tree(root: string): Promise<string[]> {
  const entries = await readdir(root, { recursive: true });
  return entries.map(String).sort();
}

function job(id: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    job_id: id,
    argv: ['/opt/driver/run'],
    cwd: join(dir, 'work', id),
    outcome_path: join(dir, 'work', id, 'out', `${id}.json`),
    ...extra,
  };
}

async function startWith(
  jobs: Record<string, unknown>[],
  options: Partial<StartBatchOptions> = {},
  opened: string[] = [],
): Promise<unknown> {
  const path = join(dir, `manifest-${Math.random().toString(16).slice(2)}.json`);
  await writeFile(
    path,
    JSON.stringify({ schema: 'roboguide.e1.batch/v0.1', image: 'roboguide/pair-driver:1', jobs }),
  );
  const before = await tree(dir);
  const error = await prepareBatch(
    {
      fs,
      host: procHostIdentity,
      runtime: engine,
      clock,
      checkRegistry: () => Promise.resolve(void opened.push('registry')),
    },
    {
      manifestPath: path,
      output: join(dir, 'D'),
      registryPath: join(dir, 'state', 'registry.db'),
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 't',
      hostAddresses: ['127.0.0.1', '::1'],
      hostPaths: { homeDir: join(dir, 'home'), engineSocketPaths: [join(dir, 'engine', 'docker.sock')] },
      ...options,
    },
  ).then(
    () => null,
    (err: unknown) => err,
  );
  expect(await tree(dir), 'nothing written').toEqual(before);
  expect(opened, 'registry not opened').toEqual([]);
  return error;
}

function expectRefusal(error: unknown, path: string, rule: RegExp): void {
  expect(error).toMatchObject({ code: 'E_MANIFEST_INVALID', exitCode: 2 });
  const issues = (error as { issues: { path: string; rule: string }[] }).issues;
  expect(
    issues.filter((i) => i.path === path && rule.test(i.rule)),
    JSON.stringify(issues),
  ).not.toEqual([]);
}

describe('e1-batch start refuses, writing nothing', () => {
  it('job_id "." and ".."', async () => {
    const error = await startWith([
      job('.', { outcome_path: join(dir, 'o', 'a.json') }),
      job('..', { outcome_path: join(dir, 'o', 'b.json') }),
    ]);
    expect(error).toMatchObject({ code: 'E_MANIFEST_INVALID', exitCode: 2 });
    expect((error as { issues: { path: string }[] }).issues.map((i) => i.path)).toEqual([
      'jobs[0].job_id',
      'jobs[1].job_id',
    ]);
  });

  it('a cwd that contains the output directory, and an outcome folder inside it', async () => {
    expectRefusal(
      await startWith([job('a', { cwd: dir })]),
      'jobs[0].cwd',
      /must not contain the output directory/,
    );
    expectRefusal(
      await startWith([job('a', { outcome_path: join(dir, 'D', 'jobs', 'b', 'result.json') })]),
      'jobs[0].outcome_path',
      /inside the output directory/,
    );
  });

  it('a cwd that reaches the output directory through a symlink (compared by real path)', async () => {
    await mkdir(join(dir, 'D'));
    await symlink(join(dir, 'D'), join(dir, 'alias'));
    expectRefusal(
      await startWith([job('a', { cwd: join(dir, 'alias', 'jobs') })]),
      'jobs[0].cwd',
      /inside the output directory/,
    );
  });

  it('a cwd or outcome folder holding the registry database', async () => {
    expectRefusal(
      await startWith([job('a', { cwd: join(dir, 'state') })]),
      'jobs[0].cwd',
      /registry database/,
    );
  });

  it('mounts of /, /etc, /proc, /var/lib/docker, $HOME and the engine socket folder', async () => {
    const error = await startWith([
      job('a', { cwd: '/' }),
      job('b', { cwd: '/etc' }),
      job('c', { cwd: '/proc/self' }),
      job('d', { cwd: '/var/lib/docker' }),
      job('e', { cwd: join(dir, 'home') }),
      job('f', { cwd: join(dir, 'engine') }),
    ]);
    expectRefusal(error, 'jobs[0].cwd', /must not be \//);
    expectRefusal(error, 'jobs[1].cwd', /system folder \/etc/);
    expectRefusal(error, 'jobs[2].cwd', /system folder \/proc/);
    expectRefusal(error, 'jobs[3].cwd', /system folder \/var\/lib\/docker/);
    expectRefusal(error, 'jobs[4].cwd', /home folder/);
    expectRefusal(error, 'jobs[5].cwd', /engine socket/);
  });

  it('an outcome path with a symlink anywhere in it, a dangling one included', async () => {
    await mkdir(join(dir, 'real'));
    await symlink(join(dir, 'real'), join(dir, 'linked'));
    expectRefusal(
      await startWith([job('a', { outcome_path: join(dir, 'linked', 'a.json') })]),
      'jobs[0].outcome_path',
      /symbolic link/,
    );
    await mkdir(join(dir, 'out'));
    await symlink(join(dir, 'nowhere'), join(dir, 'out', 'b.json'));
    expectRefusal(
      await startWith([job('b', { outcome_path: join(dir, 'out', 'b.json') })]),
      'jobs[0].outcome_path',
      /already exists|symbolic link/,
    );
  });

  it("a cwd that shows another job's outcome folder (one shared out/ folder stays allowed)", async () => {
    const error = await startWith([
      job('a', { cwd: join(dir, 'w'), outcome_path: join(dir, 'w', 'out-a', 'a.json') }),
      job('b', { cwd: join(dir, 'w', 'b'), outcome_path: join(dir, 'w', 'out-b', 'b.json') }),
    ]);
    expectRefusal(error, 'jobs[0].cwd', /outcome folder .*out-b of jobs\[1\]/);
    // b's cwd lies inside a's: a could swap it for a link before b starts.
    expectRefusal(error, 'jobs[1].cwd', /lies inside the cwd .*\/w of jobs\[0\]/);
    expect((error as { issues: { path: string }[] }).issues.map((i) => i.path)).toEqual([
      'jobs[0].cwd',
      'jobs[1].cwd',
    ]);
    const shared = await jobPathIssues(
      fs,
      ['a', 'b'].map((id, i) => ({
        prefix: `jobs[${i}]`,
        cwd: join(dir, 'w'),
        outcome_path: join(dir, 'w', 'out', `${id}.json`),
      })),
      {},
    );
    expect(shared).toEqual([]);
  });

  it('a cwd outside every --mount-root, one holding "..", or under the engine\'s real data root (asked from the engine)', async () => {
    await mkdir(join(dir, 'allowed'));
    const outside = await startWith([job('a')], { mountRoots: [join(dir, 'allowed')] });
    expectRefusal(
      outside,
      'jobs[0].cwd',
      /must lie under one of the allowed mount roots \(.*allowed; add one with --mount-root\)/,
    );
    const dotdot = await startWith([job('a', { cwd: `${dir}/work/x/../a` })]);
    expectRefusal(dotdot, 'jobs[0].cwd', /must not hold a "\.\." component/);
    const dataRoot = join(dir, 'engine-data');
    const withRoot = answeringEngine({ dataRoot });
    const path = join(dir, 'manifest-root.json');
    await writeFile(
      path,
      JSON.stringify({
        schema: 'roboguide.e1.batch/v0.1',
        image: 'roboguide/pair-driver:1',
        jobs: [job('a', { cwd: join(dataRoot, 'volumes', 'x') })],
      }),
    );
    const error = await prepareBatch(
      { fs, host: procHostIdentity, runtime: withRoot, clock },
      {
        manifestPath: path,
        output: join(dir, 'D'),
        registryPath: join(dir, 'registry.db'),
        bindAddress: '127.0.0.1',
        environment: {},
        codeVersion: 't',
      },
    ).then(
      () => null,
      (err: unknown) => err,
    );
    expectRefusal(
      error,
      'jobs[0].cwd',
      /engine-data \(the engine's data, our own state or the code root runs/,
    );
    await expect(readdir(join(dir, 'D'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it("a cwd or outcome folder inside another run's evidence (a batch output, a pair run directory)", async () => {
    await mkdir(join(dir, 'old-batch', 'jobs'), { recursive: true });
    await writeFile(join(dir, 'old-batch', 'batch.json'), '{}');
    await writeFile(join(dir, 'old-batch', 'events.jsonl'), '');
    await mkdir(join(dir, 'old-run'));
    await writeFile(join(dir, 'old-run', 'receipt.json'), '{}');
    await writeFile(join(dir, 'old-run', 'stdout.log'), '');
    const error = await startWith([
      job('a', {
        cwd: join(dir, 'old-batch', 'jobs', 'a'),
        outcome_path: join(dir, 'work', 'a', 'out', 'a.json'),
      }),
      job('b', { cwd: join(dir, 'work', 'b'), outcome_path: join(dir, 'old-run', 'out', 'b.json') }),
    ]);
    expectRefusal(error, 'jobs[0].cwd', /inside the evidence of another run \(.*old-batch\)/);
    expectRefusal(error, 'jobs[1].outcome_path', /inside the evidence of another run \(.*old-run\)/);
    // A folder that merely holds one of the marks is not evidence.
    await mkdir(join(dir, 'proj'));
    await writeFile(join(dir, 'proj', 'batch.json'), '{}');
    expect(
      await jobPathIssues(
        fs,
        [{ prefix: 'jobs[0]', cwd: join(dir, 'proj'), outcome_path: join(dir, 'proj', 'out', 'a.json') }],
        {},
      ),
    ).toEqual([]);
  });

  it('--mount-root accepted: recorded in batch.json as real paths, so every launch of the batch enforces it', async () => {
    await mkdir(join(dir, 'real-root', 'work'), { recursive: true });
    await symlink(join(dir, 'real-root'), join(dir, 'root-link'));
    const path = join(dir, 'manifest-ok.json');
    const cwd = join(dir, 'real-root', 'work', 'a');
    await writeFile(
      path,
      JSON.stringify({
        schema: 'roboguide.e1.batch/v0.1',
        image: 'roboguide/pair-driver:1',
        jobs: [job('a', { cwd, outcome_path: join(cwd, 'out', 'a.json') })],
      }),
    );
    const record = await prepareBatch(
      { fs, host: procHostIdentity, runtime: engine, clock },
      {
        manifestPath: path,
        output: join(dir, 'D'),
        registryPath: join(dir, 'registry.db'),
        bindAddress: '127.0.0.1',
        environment: {},
        codeVersion: 't',
        mountRoots: [join(dir, 'root-link')],
      },
    );
    expect(record.mount_roots).toEqual([join(dir, 'real-root')]);
    expect(JSON.parse(await readFile(join(dir, 'D', 'batch.json'), 'utf8'))).toMatchObject({
      mount_roots: [join(dir, 'real-root')],
    });
  });

  it('an outcome directly in cwd (its private mount would hide cwd)', async () => {
    expectRefusal(
      await startWith([job('a', { outcome_path: join(dir, 'work', 'a', 'a.json') })]),
      'jobs[0].outcome_path',
      /directly in cwd/,
    );
  });

  it('a --bind-address that is not an IP address of this host', async () => {
    expectRefusal(await startWith([job('a')], { bindAddress: 'not-an-ip' }), '--bind-address', /IP address/);
    expectRefusal(
      await startWith([job('a')], { bindAddress: '192.0.2.77' }),
      '--bind-address',
      /this host has/,
    );
  });

  it('accepts a clean manifest and opens the registry before writing', async () => {
    const opened: string[] = [];
    const path = join(dir, 'ok.json');
    await writeFile(
      path,
      JSON.stringify({
        schema: 'roboguide.e1.batch/v0.1',
        image: 'roboguide/pair-driver:1',
        jobs: [job('a')],
      }),
    );
    await prepareBatch(
      {
        fs,
        host: procHostIdentity,
        runtime: engine,
        clock,
        checkRegistry: () => Promise.resolve(void opened.push('registry')),
      },
      {
        manifestPath: path,
        output: join(dir, 'D'),
        registryPath: join(dir, 'r.db'),
        bindAddress: '0.0.0.0',
        environment: {},
        codeVersion: 't',
        hostAddresses: ['127.0.0.1'],
      },
    );
    expect(opened).toEqual(['registry']);
    expect((await stat(join(dir, 'D', 'batch.json'))).isFile()).toBe(true);
  });
});

describe('pair run refuses before it touches the registry, writing nothing', () => {
  const registryTouched: string[] = [];
  const deps = (): RunPairDeps =>
    runPairDeps({
      fs,
      runtime: engine,
      clock,
      registry: () => {
        registryTouched.push('opened');
        throw new Error('the registry must not be opened');
      },
    });

  async function runWith(spec: unknown, text?: string, bindAddress = '127.0.0.1'): Promise<unknown> {
    registryTouched.length = 0;
    const before = await tree(dir);
    const error = await runPair(deps(), {
      specText: text ?? JSON.stringify(spec),
      specSource: 'spec.json',
      output: join(dir, 'run'),
      bindAddress,
      environment: {},
      codeVersion: 't',
      cwd: dir,
      hostAddresses: ['127.0.0.1'],
      registryPath: join(dir, 'state', 'registry.db'),
    }).then(
      () => null,
      (err: unknown) => err,
    );
    expect(await tree(dir), 'nothing written').toEqual(before);
    expect(registryTouched).toEqual([]);
    return error;
  }

  const spec = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({
    ...job('p'),
    image: 'roboguide/pair-driver:1',
    ...extra,
  });

  it('a JSON syntax error, without quoting the input', async () => {
    const error = await runWith(null, '{"job_id": "p", "environment": {"K": "sk-SECRET-VALUE-123"');
    expect(error).toMatchObject({ code: 'E_SPEC_INVALID', exitCode: 2 });
    expect(String((error as Error).message)).not.toContain('sk-SECRET');
    expect(String((error as Error).message)).toMatch(/not valid JSON/);
  });

  it('job_id "..", a cwd holding the output directory, an outcome inside the registry folder, a bad bind address', async () => {
    expect(await runWith(spec({ job_id: '..' }))).toMatchObject({
      code: 'E_SPEC_INVALID',
      issues: [{ path: 'job_id' }],
    });
    expect(await runWith(spec({ cwd: dir }))).toMatchObject({
      issues: expect.arrayContaining([
        { path: 'cwd', rule: expect.stringMatching(/output directory/) as string },
      ]) as unknown,
    });
    expect(await runWith(spec({ outcome_path: join(dir, 'state', 'o.json') }))).toMatchObject({
      issues: [{ path: 'outcome_path', rule: expect.stringMatching(/registry database/) as string }],
    });
    await mkdir(join(dir, 'o'));
    await symlink('/etc/shadow', join(dir, 'o', 'p.json'));
    expect(await runWith(spec({ outcome_path: join(dir, 'o', 'p.json') }))).toMatchObject({
      issues: expect.arrayContaining([
        { path: 'outcome_path', rule: expect.stringMatching(/symbolic link/) as string },
      ]) as unknown,
    });
    expect(await runWith(spec(), undefined, '10.1.2.3')).toMatchObject({
      issues: [{ path: '--bind-address' }],
    });
  });
});

describe('pair run reads its code version (git, in the CLI) only for a spec that passed every check', () => {
  const base = (codeVersion: () => Promise<string>) => ({
    specSource: 'spec.json',
    output: join(dir, 'run'),
    bindAddress: '127.0.0.1',
    environment: {},
    codeVersion,
    cwd: dir,
    hostAddresses: ['127.0.0.1'],
    registryPath: join(dir, 'state', 'registry.db'),
  });
  const opened: string[] = [];
  const deps = (): RunPairDeps =>
    runPairDeps({
      fs,
      host: procHostIdentity,
      runtime: engine,
      clock,
      registry: () => {
        opened.push('registry');
        return Promise.resolve(
          fakeRegistry({
            admit: () =>
              Promise.resolve({ kind: 'refused', reason: 'host_full', held: 1, limit: 1, node: 'here' }),
          }),
        );
      },
    });

  it('an invalid spec: not called', async () => {
    let calls = 0;
    const error = await runPair(deps(), {
      ...base(() => ((calls += 1), Promise.resolve('0.1.0+abc'))),
      specText: JSON.stringify({ job_id: '..' }),
    }).catch((err: unknown) => err);
    expect(error).toMatchObject({ code: 'E_SPEC_INVALID', exitCode: 2 });
    expect(calls).toBe(0);
  });

  it('a valid spec whose code version cannot be read: that error, before any slot is taken or file written', async () => {
    opened.length = 0;
    const before = await tree(dir);
    const spec = {
      job_id: 'p',
      argv: ['/opt/driver/run'],
      cwd: join(dir, 'work'),
      outcome_path: join(dir, 'out', 'p.json'),
      image: 'roboguide/pair-driver:1',
    };
    const error = await runPair(deps(), {
      ...base(() => Promise.reject(new Error('git broke'))),
      specText: JSON.stringify(spec),
    }).catch((err: unknown) => err);
    expect((error as Error).message).toBe('git broke');
    expect(opened).toEqual([]);
    expect(await tree(dir)).toEqual(before);
  });
});

describe('jobPathIssues and bindAddressProblem', () => {
  it('allows an ordinary layout, with the outcome folder above cwd', async () => {
    expect(
      await jobPathIssues(
        fs,
        [{ prefix: 'jobs[0]', cwd: join(dir, 'w', 'p1'), outcome_path: join(dir, 'w', 'p1.json') }],
        { outputDir: join(dir, 'D') },
      ),
    ).toEqual([]);
  });

  it('checks the address form and membership', () => {
    expect(bindAddressProblem('127.0.0.1', ['127.0.0.1'])).toBeNull();
    expect(bindAddressProblem('0.0.0.0', [])).toBeNull();
    expect(bindAddressProblem('::1', ['::1'])).toBeNull();
    expect(bindAddressProblem('localhost', ['127.0.0.1'])).toMatch(/IP address/);
    expect(bindAddressProblem('256.1.1.1', ['127.0.0.1'])).toMatch(/IP address/);
    expect(bindAddressProblem('10.9.9.9', ['127.0.0.1'])).toMatch(/this host has/);
  });
});
