import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN_RUN_JS } from '../../src/package-root.js';

/** `e1-batch report` and the Node guard of bin/run.js, as a user runs them (no engine needed). */
let dir: string;

function cli(args: string[], node = process.execPath) {
  const r = spawnSync(node, [BIN_RUN_JS, ...args], { encoding: 'utf8', timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('e1-batch report: bad input', () => {
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-report-cli-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('refuses --out in a folder that does not exist: exit 2, naming the flag and the rule, nothing written', async () => {
    const output = join(dir, 'not-a-batch');
    await mkdir(output);
    const r = cli(['e1-batch', 'report', '--output', output, '--out', join(dir, 'missing', 'r.html')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--out');
    expect(r.stderr).toContain('must be an existing directory');
    expect(await readdir(output)).toEqual([]);
    expect(existsSync(join(dir, 'missing'))).toBe(false);
  });

  it('refuses a folder that is not a batch output directory: exit 2, nothing written', async () => {
    const output = join(dir, 'empty');
    await mkdir(output);
    const r = cli(['e1-batch', 'report', '--output', output]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('not a batch output directory');
    expect(await readdir(output)).toEqual([]);
  });

  const oldNode = ['/usr/bin/node', '/usr/local/bin/node'].find((p) => {
    if (!existsSync(p)) return false;
    const v = spawnSync(p, ['-p', 'process.versions.node'], { encoding: 'utf8' }).stdout.trim();
    return Number(v.split('.')[0]) < 24;
  });
  it.skipIf(oldNode === undefined)(
    'bin/run.js under a Node older than 24 says so plainly and exits 1',
    () => {
      const r = cli(['--version'], oldNode);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain('roboguide-eval needs Node.js 24 or newer');
      // In this checkout: the launcher next to run.js (relative to where the user is), never npx.
      expect(r.stderr).toContain(
        'Try: bin/roboguide-eval …  (the launcher of this checkout runs its pinned Node 24)',
      );
      expect(r.stderr).not.toContain('npx');
    },
  );
});
