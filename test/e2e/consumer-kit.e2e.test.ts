/**
 * The test kit as a consumer project gets it (issue 24): `npm pack` of this checkout, unpacked into an empty
 * project's node_modules as `npm install <tarball>` would place it, and the README's example suite run there with
 * that project's own vitest. No registry is reachable here, so the packed package's dependencies are linked from
 * this checkout's node_modules (the same versions its lock file installs); what is under test is the tarball: its
 * `files`, its `exports` (`roboguide-eval/testing`), its bin and docker/ context, and the kit's behaviour on Node 24
 * and on an older Node.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { noDocker } from '../support/docker.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
let dir: string;
let project: string;

/** The README's example suite, as a consumer writes it, plus what a refused request does. */
const EXAMPLE = `import { afterAll, beforeAll, expect, it } from 'vitest';
import { ApiCallError, buildPairDriverImage, expectNoContainersLeft, startTestServer } from 'roboguide-eval/testing';

let server;
beforeAll(async () => {
  await buildPairDriverImage();
  server = await startTestServer({ env: { API_TOKEN: 'tok-123456' } });
});
afterAll(async () => {
  await server.dispose();
  await expectNoContainersLeft({ suite: 'consumer-example' });
});

it('runs a command in a session, with the secret masked', async () => {
  const { body: s } = await server.client.call('POST', '/v1/sessions', {
    body: { image: 'roboguide/pair-driver:1', environment: { TOKEN: '\${API_TOKEN}' }, labels: { suite: 'consumer-example' } },
  });
  const { body: out } = await server.client.call('POST', \`/v1/sessions/\${s.session_id}/exec\`, { body: { command: 'echo "$TOKEN"' } });
  expect(out.stdout).toBe('[REDACTED]\\n');
  await server.client.call('DELETE', \`/v1/sessions/\${s.session_id}\`);
});

it('a refused request throws with the server code and message; raw mode returns the status', async () => {
  const request = { body: { image: 'roboguide/pair-drvier:1', labels: { suite: 'consumer-example' } } };
  const err = await server.client.call('POST', '/v1/sessions', request).catch((e) => e);
  expect(err).toBeInstanceOf(ApiCallError);
  expect([err.status, err.code]).toEqual([400, 'E_IMAGE_MISSING']);
  expect(err.message).toContain('POST /v1/sessions → 400 E_IMAGE_MISSING: image roboguide/pair-drvier:1 is not present on this engine');
  const raw = await server.client.raw.call('POST', '/v1/sessions', request);
  expect([raw.status, raw.body.error.code]).toEqual([400, 'E_IMAGE_MISSING']);
});
`;

describe.skipIf(noDocker)('the test kit in a consumer project (npm pack)', () => {
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-consumer-'));
    project = join(dir, 'consumer');
    const modules = join(project, 'node_modules');
    await mkdir(join(modules, 'roboguide-eval'), { recursive: true });
    const packed = spawnSync('npm', ['pack', '--silent', '--pack-destination', dir], { cwd: ROOT, encoding: 'utf8' });
    expect(packed.status, packed.stderr).toBe(0);
    const tarball = join(dir, packed.stdout.trim().split('\n').at(-1) ?? '');
    expect(spawnSync('tar', ['-xzf', tarball, '-C', join(modules, 'roboguide-eval'), '--strip-components=1']).status).toBe(0);
    // The dependencies (and vitest, the consumer's own devDependency), linked: nothing of this checkout's own code.
    for (const name of await readdir(join(ROOT, 'node_modules'))) {
      if (name === 'roboguide-eval' || name === '.package-lock.json') continue;
      await symlink(join(ROOT, 'node_modules', name), join(modules, name));
    }
    await writeFile(join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module', devDependencies: { 'roboguide-eval': 'file:roboguide-eval-0.1.0.tgz', vitest: '^4.1.12' } }));
    await writeFile(join(project, 'example.test.js'), EXAMPLE);
  }, 120_000);
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('the tarball carries what the kit needs and none of the sources or tests', async () => {
    const pkg = join(project, 'node_modules', 'roboguide-eval');
    for (const file of ['bin/run.js', 'dist/testing/index.js', 'dist/testing/index.d.ts', 'docker/pair-driver/Dockerfile', 'oclif.manifest.json']) expect(existsSync(join(pkg, file)), file).toBe(true);
    for (const absent of ['src', 'test', 'node_modules']) expect(existsSync(join(pkg, absent)), absent).toBe(false);
    expect((JSON.parse(await readFile(join(pkg, 'package.json'), 'utf8')) as { engines: { node: string } }).engines.node).toBe('>=24');
  });

  it("runs the README's example suite with the project's own vitest on Node 24", () => {
    const r = spawnSync(process.execPath, [join(project, 'node_modules', 'vitest', 'vitest.mjs'), 'run', '--root', project], { cwd: project, encoding: 'utf8', timeout: 240_000, env: { ...process.env, CI: '1' } });
    expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
    expect(r.stdout).toMatch(/Tests\s+.*2 passed/);
  }, 260_000);

  it.skipIf(!existsSync('/usr/bin/node') || Number(spawnSync('/usr/bin/node', ['-p', 'process.versions.node.split(".")[0]'], { encoding: 'utf8' }).stdout) >= 24)(
    'on an older Node the kit refuses at import, naming the version it needs',
    () => {
      const r = spawnSync('/usr/bin/node', ['--input-type=module', '-e', "await import('roboguide-eval/testing')"], { cwd: project, encoding: 'utf8' });
      expect(r.status).not.toBe(0);
      expect(r.stderr).toContain('roboguide-eval/testing needs Node.js 24 or newer (node:sqlite); this is v');
      expect(r.stderr).not.toContain('No such built-in module');
    },
  );
});
