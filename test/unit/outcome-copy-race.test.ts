import { spawn, type ChildProcess } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { UnsafePathError } from '../../src/adapters/no-follow-dir.js';
import { publishOutcomeCopy } from '../../src/adapters/outcome-reader.js';

/**
 * The operator copy of the outcome is made in the pair's cwd, which a hostile pair (or another pair sharing it)
 * can rename and relink while the copy is made. A concurrent adversary — a separate process, so its renames really
 * interleave with our steps — keeps renaming an ancestor of the outcome folder away and planting a link to a
 * root-only folder in its place. Nothing may ever be created through the link: each try lands inside the cwd
 * (where the folder it holds has moved) or is refused with E_UNSAFE_PATH.
 */
const TRIES = 300;

const ADVERSARY = `
import os, sys
os.chdir(sys.argv[1])
i = 0
while True:
    i += 1
    moved = 'a.moved-%d' % i
    try: os.rename('a', moved)
    except OSError: moved = None
    try: os.symlink(sys.argv[2], 'a')
    except OSError: pass
    try: os.unlink('a')
    except OSError: pass
    if moved is not None:
        try: os.rename(moved, 'a')
        except OSError: pass
`;

let dir: string;
let adversary: ChildProcess | undefined;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-outcome-race-'));
});
afterEach(async () => {
  if (adversary?.pid !== undefined && adversary.exitCode === null && adversary.signalCode === null) {
    const exited = new Promise((resolve) => adversary?.once('exit', resolve));
    adversary.kill('SIGKILL');
    await exited;
  }
  adversary = undefined;
  await rm(dir, { recursive: true, force: true });
});

async function everyPath(root: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(root, { withFileTypes: true })) {
    const path = join(root, entry.name);
    out.push(path);
    if (entry.isDirectory()) out.push(...(await everyPath(path)));
  }
  return out;
}

describe('publishOutcomeCopy: openat-style steps, never through a link', () => {
  it(`${TRIES} tries against a process renaming an ancestor and planting a link to a root-only folder: nothing is created outside, each copy lands in the cwd or is refused (E_UNSAFE_PATH)`, async () => {
    const cwd = join(dir, 'cwd');
    const rootOnly = join(dir, 'root-only');
    await mkdir(join(cwd, 'a'), { recursive: true });
    await mkdir(rootOnly, { mode: 0o700 });
    await chmod(rootOnly, 0o700);
    adversary = spawn('python3', ['-c', ADVERSARY, cwd, rootOnly], { stdio: 'ignore' });
    await new Promise((resolve) => setTimeout(resolve, 50)); // the loop is running
    let landed = 0;
    let refused = 0;
    const otherErrors: string[] = [];
    for (let i = 0; i < TRIES; i++) {
      const bytes = Buffer.from(`{"try":${i}}`);
      try {
        await publishOutcomeCopy(bytes, join(cwd, 'a', `t${i}`, 'out', 'o.json'));
        landed++;
      } catch (err) {
        if (err instanceof UnsafePathError && err.code === 'E_UNSAFE_PATH') refused++;
        else otherErrors.push(String(err));
      }
    }
    expect(adversary.exitCode).toBeNull(); // it raced the whole time
    const exited = new Promise((resolve) => adversary?.once('exit', resolve));
    adversary.kill('SIGKILL');
    await exited;
    // The class, not an instance: the root-only folder is untouched, whatever the interleaving.
    expect(await readdir(rootOnly)).toEqual([]);
    expect((await stat(rootOnly)).mode & 0o777).toBe(0o700);
    expect(otherErrors).toEqual([]);
    // Every copy that landed is a whole file inside the cwd, 0600 in a folder closed to others.
    const files = (await everyPath(cwd)).filter((p) => p.endsWith('/o.json'));
    expect(files.length).toBe(landed);
    for (const file of files) {
      expect(await readFile(file, 'utf8')).toMatch(/^\{"try":\d+\}$/);
      expect((await stat(file)).mode & 0o777).toBe(0o600);
    }
    expect(landed + refused).toBe(TRIES);
    // Both endings were seen: the adversary really planted links while copies were made.
    expect(refused).toBeGreaterThan(0);
    expect(landed).toBeGreaterThan(0);
    console.log(`outcome copy race: ${TRIES} tries, ${landed} landed in the cwd, ${refused} refused`);
  });

  it('refuses a link anywhere on the path, planted before the copy, and creates nothing through it', async () => {
    const cwd = join(dir, 'cwd');
    const rootOnly = join(dir, 'root-only');
    await mkdir(cwd);
    await mkdir(rootOnly, { mode: 0o700 });
    await symlink(rootOnly, join(cwd, 'a'));
    const err: unknown = await publishOutcomeCopy(Buffer.from('{}'), join(cwd, 'a', 'b', 'o.json')).catch(
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ code: 'E_UNSAFE_PATH', path: join(cwd, 'a') });
    expect(await readdir(rootOnly)).toEqual([]);
  });
});

describe('publishOutcomeCopy: the folder it closes to others', () => {
  it("clears the other bits of the pair's own folder (0755 made by the engine), never of a shared one (sticky or writable by others)", async () => {
    const base = await mkdtemp(join(tmpdir(), 'rg-outcome-shared-'));
    try {
      const own = join(base, 'own');
      const sticky = join(base, 'sticky');
      const open = join(base, 'open');
      for (const [dir, mode] of [
        [own, 0o755],
        [sticky, 0o1777],
        [open, 0o777],
      ] as const) {
        await mkdir(dir);
        await chmod(dir, mode);
        await publishOutcomeCopy(Buffer.from('{}'), join(dir, 'o.json'));
        expect(((await stat(join(dir, 'o.json'))).mode & 0o777).toString(8)).toBe('600');
      }
      expect(((await stat(own)).mode & 0o7777).toString(8)).toBe('750');
      expect(((await stat(sticky)).mode & 0o7777).toString(8)).toBe('1777');
      expect(((await stat(open)).mode & 0o7777).toString(8)).toBe('777');
    } finally {
      await rm(base, { recursive: true, force: true });
    }
  });
});
