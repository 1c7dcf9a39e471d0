/**
 * The test kit as a consumer project gets it (issues 24 and 30): `npm pack` of this checkout, unpacked into an empty
 * project's node_modules as `npm install <tarball>` would place it, and docs/testing.md's example suite
 * (test/e2e/consumer/example.test.ts: a PairDriverContainer with no network, a RoboguideServer, a session exec, no
 * container left) run there with that project's own vitest and testcontainers; then the same kit in a suite SIGKILLed
 * halfway, and the next run's sweep. The dependencies are linked from this checkout's node_modules (the versions its
 * lock file installs): no registry, fast and deterministic (a registry install of the tarball, vitest and
 * testcontainers took 100 s here). What is under test is the tarball: its `files`, its `exports`
 * (`roboguide-eval/testing`), its bin and docker/ context, and the kit's behaviour on Node 24 and on an older Node.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serverRecordsDir } from '../../src/testing/state-dir.js';
import { containersLabelled, noDocker, runtime } from '../support/docker.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
let dir: string;
let project: string;

/** The suites the consumer project runs: docs/testing.md's example, and one that is killed halfway. */
const SUITES = join(ROOT, 'test', 'e2e', 'consumer');

/** The consumer's own vitest, in the consumer project, on Node 24 (this process's node), Ryuk off as here. */
function consumerVitest(file: string): { status: number | null; output: string; wallMs: number } {
  const started = Date.now();
  const r = spawnSync(
    process.execPath,
    [join(project, 'node_modules', 'vitest', 'vitest.mjs'), 'run', file, '--root', project],
    {
      cwd: project,
      encoding: 'utf8',
      timeout: 240_000,
      env: { ...process.env, CI: '1', TESTCONTAINERS_RYUK_DISABLED: 'true' },
    },
  );
  return { status: r.status, output: `${r.stdout}\n${r.stderr}`, wallMs: Date.now() - started };
}

describe.skipIf(noDocker)('the test kit in a consumer project (npm pack)', () => {
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-consumer-'));
    project = join(dir, 'consumer');
    const modules = join(project, 'node_modules');
    await mkdir(join(modules, 'roboguide-eval'), { recursive: true });
    const packed = spawnSync('npm', ['pack', '--silent', '--pack-destination', dir], {
      cwd: ROOT,
      encoding: 'utf8',
    });
    expect(packed.status, packed.stderr).toBe(0);
    const tarball = join(dir, packed.stdout.trim().split('\n').at(-1) ?? '');
    expect(
      spawnSync('tar', ['-xzf', tarball, '-C', join(modules, 'roboguide-eval'), '--strip-components=1'])
        .status,
    ).toBe(0);
    // The dependencies (and vitest, the consumer's own devDependency), linked: nothing of this checkout's own code.
    for (const name of await readdir(join(ROOT, 'node_modules'))) {
      if (name === 'roboguide-eval' || name === '.package-lock.json') continue;
      await symlink(join(ROOT, 'node_modules', name), join(modules, name));
    }
    await writeFile(
      join(project, 'package.json'),
      JSON.stringify({
        name: 'consumer',
        private: true,
        type: 'module',
        devDependencies: {
          'roboguide-eval': 'file:roboguide-eval-0.1.0.tgz',
          testcontainers: '^12.2.0',
          vitest: '^4.1.12',
        },
      }),
    );
    for (const file of ['example.test.ts', 'killed.test.ts'])
      await copyFile(join(SUITES, file), join(project, file));
  }, 120_000);
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('the tarball carries what the kit needs and none of the sources or tests', async () => {
    const pkg = join(project, 'node_modules', 'roboguide-eval');
    for (const file of [
      'bin/run.js',
      'dist/testing/index.js',
      'dist/testing/index.d.ts',
      'docker/pair-driver/Dockerfile',
      'oclif.manifest.json',
    ])
      expect(existsSync(join(pkg, file)), file).toBe(true);
    for (const absent of ['src', 'test', 'node_modules'])
      expect(existsSync(join(pkg, absent)), absent).toBe(false);
    expect(
      (JSON.parse(await readFile(join(pkg, 'package.json'), 'utf8')) as { engines: { node: string } }).engines
        .node,
    ).toBe('>=24');
  });

  it("runs docs/testing.md's example suite with the project's own vitest and testcontainers on Node 24: no network, a session exec, no container left", async () => {
    const r = consumerVitest('example.test.ts');
    console.log(`consumer example suite: ${r.wallMs} ms`);
    expect(r.status, r.output).toBe(0);
    expect(r.output).toMatch(/Tests\s+.*2 passed/);
    expect(await containersLabelled({ suite: 'consumer-example' })).toEqual([]);
  }, 260_000);

  it("a run SIGKILLed halfway leaves its pair, its server and the server's session; the next run's sweep removes them", async () => {
    const halfway = join(dir, 'halfway.json');
    const child = spawn(
      process.execPath,
      [join(project, 'node_modules', 'vitest', 'vitest.mjs'), 'run', 'killed.test.ts', '--root', project],
      {
        cwd: project,
        detached: true, // its own process group: the kill below takes vitest, its workers and the server, as CI's timeout would
        stdio: 'ignore',
        env: { ...process.env, CI: '1', TESTCONTAINERS_RYUK_DISABLED: 'true', HALFWAY_FILE: halfway },
      },
    );
    const exited = new Promise((resolve) => child.once('exit', resolve));
    const deadline = Date.now() + 120_000;
    while (!existsSync(halfway) && Date.now() < deadline && child.exitCode === null)
      await new Promise((resolve) => setTimeout(resolve, 200));
    expect(existsSync(halfway), 'the killed suite never got halfway').toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 200)); // the file's write is complete
    const left = JSON.parse(await readFile(halfway, 'utf8')) as {
      pair: string;
      session: string;
      workDir: string;
    };
    process.kill(-child.pid!, 'SIGKILL');
    await exited;
    // What the kill left: the pair container and the session's container, both running, and the server's folder.
    expect((await containersLabelled({ suite: 'consumer-killed' })).sort()).toHaveLength(2);
    expect(await containersLabelled({ suite: 'consumer-killed' })).toContain(left.pair);
    expect(existsSync(left.workDir)).toBe(true);

    const next = consumerVitest('example.test.ts');
    console.log(`consumer example suite after the kill (sweep included): ${next.wallMs} ms`);
    expect(next.status, next.output).toBe(0);
    expect(await containersLabelled({ suite: 'consumer-killed' })).toEqual([]);
    expect(await runtime().inspect(left.pair)).toBeNull();
    expect(existsSync(left.workDir)).toBe(false);
    expect(
      (await readdir(serverRecordsDir()).catch(() => [])).filter((f) =>
        readFileSync(join(serverRecordsDir(), f), 'utf8').includes(left.workDir),
      ),
    ).toEqual([]);
  }, 400_000);

  it.skipIf(
    !existsSync('/usr/bin/node') ||
      Number(
        spawnSync('/usr/bin/node', ['-p', 'process.versions.node.split(".")[0]'], { encoding: 'utf8' })
          .stdout,
      ) >= 24,
  )('on an older Node the kit refuses at import, naming the version it needs', () => {
    const r = spawnSync(
      '/usr/bin/node',
      ['--input-type=module', '-e', "await import('roboguide-eval/testing')"],
      { cwd: project, encoding: 'utf8' },
    );
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('roboguide-eval/testing needs Node.js 24 or newer (node:sqlite); this is v');
    expect(r.stderr).not.toContain('No such built-in module');
  });
});
