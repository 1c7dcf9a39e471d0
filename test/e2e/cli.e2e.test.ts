import { spawn, spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DRIVER_IMAGE, noDocker, runtime } from '../support/docker.js';

const BIN = fileURLToPath(new URL('../../bin/run.js', import.meta.url));
let dir: string;

/** The built CLI as a user runs it (`npm run build` precedes the integration suite). */
function cli(args: string[], env: Record<string, string> = {}) {
  const r = spawnSync(process.execPath, [BIN, ...args], {
    encoding: 'utf8',
    env: { ...process.env, ...env },
    timeout: 120_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('the CLI as a black box', () => {
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-cli-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('exposes the library API from the package entry point', async () => {
    const api = (await import(new URL('../../dist/index.js', import.meta.url).href)) as Record<
      string,
      unknown
    >;
    for (const name of [
      'runPair',
      'prepareBatch',
      'supervise',
      'readStatus',
      'reconcileBatch',
      'parseManifest',
    ]) {
      expect(typeof api[name], name).toBe('function');
    }
    // The adapters come from the subpath that says so, never from the use-cases' entry.
    const adapters = (await import(new URL('../../dist/adapters-entry.js', import.meta.url).href)) as Record<
      string,
      unknown
    >;
    for (const name of ['createRedactStream', 'DockerContainerRuntime', 'createExecutePairDeps']) {
      expect(typeof api[name], name).toBe('undefined');
      expect(typeof adapters[name], name).toBe('function');
    }
  });

  it('lists every command in --help', () => {
    const r = cli(['--help']);
    expect(r.code).toBe(0);
    for (const topic of ['e1-batch', 'pair', 'diagnose', 'reconcile', 'doctor', 'b1', 'images', 'capacity'])
      expect(r.stdout).toContain(topic);
    const start = cli(['e1-batch', 'start', '--help']);
    expect(start.stdout).toContain('--manifest');
    expect(start.stdout).toContain('--foreground');
  });

  it('rejects a bad manifest with exit 2, one line per problem naming path and rule, and creates nothing', async () => {
    const manifest = join(dir, 'bad.json');
    await writeFile(
      manifest,
      JSON.stringify({
        schema: 'roboguide.e1.batch/v0.1',
        image: DRIVER_IMAGE,
        jobs: [
          { job_id: 'a', argv: [], cwd: 'relative', outcome_path: '/x/a.json', timout_seconds: 5 },
          {
            job_id: 'a',
            argv: ['x'],
            cwd: '/w',
            outcome_path: '/x/a.json',
            environment: { OPENAI_API_KEY: 'sk-literal-value' },
          },
        ],
      }),
    );
    const output = join(dir, 'never');
    const r = cli(['e1-batch', 'start', '--manifest', manifest, '--output', output]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('jobs[0].argv');
    expect(r.stderr).toContain('jobs[0].cwd');
    expect(r.stderr).toContain('timout_seconds');
    expect(r.stderr).toContain('jobs[1].environment');
    expect(r.stderr).not.toContain('sk-literal-value');
    await expect(stat(output)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('prints a machine-readable error with --json', async () => {
    const manifest = join(dir, 'unset.json');
    await writeFile(
      manifest,
      JSON.stringify({
        schema: 'roboguide.e1.batch/v0.1',
        image: DRIVER_IMAGE,
        jobs: [
          {
            job_id: 'a',
            argv: ['x'],
            // A cwd that passes: unset variables alone keep their own code (with other errors, all are listed together).
            cwd: await mkdtemp(join(dir, 'cwd-')),
            outcome_path: join(dir, 'o', 'a.json'),
            environment: { TOKEN: '${RG_E2E_UNSET}' },
          },
        ],
      }),
    );
    const r = cli(['e1-batch', 'start', '--manifest', manifest, '--output', join(dir, 'never-2'), '--json']);
    expect(r.code).toBe(2);
    const body = JSON.parse(r.stdout);
    expect(body.error.code).toBe('E_ENV_MISSING');
    expect(body.error.issues).toEqual([expect.objectContaining({ path: 'jobs[0].environment.TOKEN' })]);
    expect(await readdir(dir)).not.toContain('never-2');
  });

  it("--json: oclif's own refusals (an unknown flag, a missing required one) are the same small error object, exit 2", () => {
    for (const args of [
      ['pair', 'run', '--bogus', '--json'],
      ['pair', 'run', '--json'],
      ['e1-batch', 'start', '--json'],
    ]) {
      const r = cli(args);
      expect(r.code, args.join(' ')).toBe(2);
      // Once a dump of oclif's whole configuration and command manifest (about 190 KB), with no code nor exit code.
      expect(r.stdout.length, args.join(' ')).toBeLessThan(2_000);
      const body = JSON.parse(r.stdout) as { error: Record<string, unknown> };
      expect(Object.keys(body.error).sort(), args.join(' ')).toEqual(['code', 'exit_code', 'message']);
      expect(body.error.code).toBe('E_USAGE');
      expect(body.error.exit_code).toBe(2);
      expect(body.error.message, args.join(' ')).toMatch(/Nonexistent flag: --bogus|Missing required flag/);
    }
  });

  it('capacity with a HOME (or XDG_STATE_HOME) under /proc ends with an error naming the registry, never hangs', () => {
    for (const env of [{ HOME: '/proc', XDG_STATE_HOME: '' }, { XDG_STATE_HOME: '/proc/1' }]) {
      // Node's recursive mkdir never returned there: the command hung until killed.
      const r = spawnSync(process.execPath, [BIN, 'capacity', '--json'], {
        encoding: 'utf8',
        env: { ...process.env, ...env },
        timeout: 30_000,
      });
      expect(r.signal, JSON.stringify(env)).toBeNull();
      expect(r.status, JSON.stringify(env)).not.toBe(0);
      expect(r.stdout, JSON.stringify(env)).toContain('registry');
    }
  });

  it('diagnose sessions: a real Codex 0.171 429 is named; a 0.60 rollout says no structured failure was found', () => {
    const fixtures = fileURLToPath(new URL('../fixtures/codex/', import.meta.url));
    const failed = cli(['diagnose', 'sessions', '--dir', join(fixtures, '0.171.0', '429'), '--json']);
    expect(failed.code).toBe(0);
    expect(JSON.parse(failed.stdout)).toMatchObject({
      provider_failure: {
        schema: 'roboguide.provider_failure/v1',
        kind: 'response_too_many_failed_attempts',
        http_status: 429,
      },
      files_read: 1,
      files_unreadable: 0,
      turn_end_found: true,
    });
    const nothing = cli(['diagnose', 'sessions', '--dir', join(fixtures, '0.60.1', '429')]);
    expect(nothing.code).toBe(0);
    expect(nothing.stdout).toContain('no structured failure found');
    expect(nothing.stdout).toMatch(/read 1 session file\(s\), \d+ line\(s\); no turn end was found/);
  });

  it('refuses a ${NAME} value under 8 characters on start and pair run: exit 2, the variable named, the value nowhere, nothing written', async () => {
    const manifest = join(dir, 'short.json');
    const job = {
      job_id: 'a',
      argv: ['x'],
      cwd: '/w',
      outcome_path: join(dir, 'o', 'short-a.json'),
      environment: { API_TOKEN: '${RG_E2E_SHORT}' },
    };
    await writeFile(
      manifest,
      JSON.stringify({ schema: 'roboguide.e1.batch/v0.1', image: DRIVER_IMAGE, jobs: [job] }),
    );
    const start = cli(['e1-batch', 'start', '--manifest', manifest, '--output', join(dir, 'never-short')], {
      RG_E2E_SHORT: 'Zq7#xw',
    });
    expect(start.code).toBe(2);
    expect(start.stderr).toMatch(
      /jobs\[0\]\.environment\.API_TOKEN: references \$\{RG_E2E_SHORT\}, whose value is shorter than 8 characters/,
    );
    expect(start.stderr).toContain('--allow-short-secrets');
    const spec = join(dir, 'short-spec.json');
    await writeFile(spec, JSON.stringify({ ...job, image: DRIVER_IMAGE }));
    const pair = cli(['pair', 'run', '--spec', spec, '--output', join(dir, 'never-short-pair')], {
      RG_E2E_SHORT: 'Zq7#xw',
    });
    expect(pair.code).toBe(2);
    expect(pair.stderr).toContain('RG_E2E_SHORT');
    for (const r of [start, pair]) expect(r.stdout + r.stderr).not.toContain('Zq7#xw');
    expect(await readdir(dir)).not.toContain('never-short');
    expect(await readdir(dir)).not.toContain('never-short-pair');
    expect(cli(['pair', 'run', '--help']).stdout).toContain('--allow-short-secrets');
  });

  it('--mount-root with --mount-root-only: start refuses a cwd outside it (exit 2, the field and the rule named, nothing written); every command documents both', async () => {
    const roots = join(dir, 'roots');
    await mkdir(join(roots, 'allowed'), { recursive: true });
    const manifest = join(dir, 'roots.json');
    const job = {
      job_id: 'a',
      argv: ['x'],
      cwd: join(roots, 'outside'),
      outcome_path: join(roots, 'outside', 'o', 'a.json'),
    };
    await writeFile(
      manifest,
      JSON.stringify({ schema: 'roboguide.e1.batch/v0.1', image: DRIVER_IMAGE, jobs: [job] }),
    );
    const start = cli([
      'e1-batch',
      'start',
      '--manifest',
      manifest,
      '--output',
      join(dir, 'never-roots'),
      '--mount-root',
      join(roots, 'allowed'),
      '--mount-root-only',
    ]);
    expect(start.code).toBe(2);
    expect(start.stderr).toMatch(/jobs\[0\]\.cwd: must lie under one of the allowed mount roots/);
    expect(await readdir(dir)).not.toContain('never-roots');
    const missing = cli(['pair', 'run', '--spec', manifest, '--mount-root', join(roots, 'missing')]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/--mount-root\[0\]: .*must be an existing folder/);
    for (const command of [['e1-batch', 'start'], ['pair', 'run'], ['serve'], ['doctor']]) {
      const help = cli([...command, '--help']).stdout;
      expect(help, command.join(' ')).toContain('--mount-root');
      expect(help, command.join(' ')).toContain('--mount-root-only');
    }
  });

  it('capacity sets host limits that every later call (and batch) sees, and rejects a bad value', () => {
    const registry = join(dir, 'cap.db');
    const set = cli([
      'capacity',
      '--registry',
      registry,
      '--max-reservations',
      '1',
      '--gpu-mib',
      '40000',
      '--json',
    ]);
    expect(set.code).toBe(0);
    expect(JSON.parse(set.stdout).limits).toEqual({ maxReservations: 1, gpuMib: 40000 });
    const read = JSON.parse(cli(['capacity', '--registry', registry, '--json']).stdout);
    expect(read).toMatchObject({ limits: { maxReservations: 1, gpuMib: 40000 }, held: [], board: [] });
    const bad = cli(['capacity', '--registry', registry, '--gpu-mib', 'lots']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--gpu-mib');
  });

  it('exits 3 when no Docker engine answers', async () => {
    const spec = join(dir, 'spec.json');
    await writeFile(
      spec,
      JSON.stringify({
        job_id: 'e',
        argv: ['x'],
        cwd: join(dir, 'e', 'cwd'),
        outcome_path: join(dir, 'e', 'out', 'o.json'),
        image: DRIVER_IMAGE,
      }),
    );
    const r = cli(['pair', 'run', '--spec', spec, '--output', join(dir, 'no-engine')], {
      DOCKER_HOST: 'unix:///nonexistent/docker.sock',
    });
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/E_ENGINE_UNAVAILABLE/);
    await expect(stat(join(dir, 'no-engine'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it.skipIf(noDocker)(
    'on SIGTERM stops the pair, removes its container, writes the result, then re-raises',
    async () => {
      const spec = join(dir, 'sig.json');
      const evidence = join(dir, 'sig-evidence');
      await writeFile(
        spec,
        JSON.stringify({
          job_id: 'sig',
          argv: ['/opt/driver/run', 'numbered=1', 'hang'],
          cwd: join(dir, 'sig'),
          outcome_path: join(dir, 'sig', 'out', 'o.json'),
          image: DRIVER_IMAGE,
          stop_budget_seconds: 2,
        }),
      );
      const child = spawn(process.execPath, [BIN, 'pair', 'run', '--spec', spec, '--output', evidence], {
        stdio: 'ignore',
      });
      const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
        child.on('exit', (code, signal) => resolve({ code, signal })),
      );
      let containerId: string | null = null;
      for (let i = 0; i < 300 && containerId === null; i++) {
        const receipt = await readFile(join(evidence, 'receipt.json'), 'utf8').then(
          (t) => JSON.parse(t) as { container_id: string | null },
          () => null,
        );
        containerId = receipt?.container_id ?? null;
        if (containerId === null) await new Promise((r) => setTimeout(r, 100));
      }
      expect(containerId).not.toBeNull();
      child.kill('SIGTERM');
      expect(await exited).toEqual({ code: null, signal: 'SIGTERM' });
      const result = JSON.parse(await readFile(join(evidence, 'result.json'), 'utf8'));
      expect(result.reasons).toContain('terminated');
      expect(result.cleanup.verified_absent).toBe(true);
      expect(await runtime().inspect(containerId!)).toBeNull();
    },
  );

  it.skipIf(noDocker)('runs a pair and prints the result.json contract with --json', async () => {
    const spec = join(dir, 'ok.json');
    await writeFile(
      spec,
      JSON.stringify({
        job_id: 'ok',
        argv: ['/opt/driver/run', 'outcome=completed'],
        cwd: join(dir, 'ok'),
        outcome_path: join(dir, 'ok', 'out', 'o.json'),
        image: DRIVER_IMAGE,
      }),
    );
    const r = cli(['pair', 'run', '--spec', spec, '--output', join(dir, 'ok-evidence'), '--json']);
    expect(r.code).toBe(0);
    const result = JSON.parse(r.stdout);
    expect(result).toMatchObject({
      schema: 'roboguide.e1.result/v1',
      job_id: 'ok',
      classification: 'completed',
      cleanup: { verified_absent: true },
    });
    // The receipt's code version is the one the build recorded (dist/build-info.json), not asked of git by the run.
    const built = JSON.parse(
      await readFile(fileURLToPath(new URL('../../dist/build-info.json', import.meta.url)), 'utf8'),
    ) as {
      version: string;
      commit: string | null;
      dirty: boolean;
    };
    const receipt = JSON.parse(await readFile(join(dir, 'ok-evidence', 'receipt.json'), 'utf8')) as {
      code_version: string;
    };
    expect(receipt.code_version).toBe(
      built.commit === null
        ? built.version
        : `${built.version}+${built.commit}${built.dirty ? '.dirty' : ''}`,
    );
  });
});
