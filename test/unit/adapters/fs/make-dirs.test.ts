import { mkdir, mkdtemp, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { makeDirs, makeDirsSync } from '../../../../src/adapters/fs/make-dirs.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-make-dirs-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const variants = [
  ['makeDirs', (path: string, mode?: number) => makeDirs(path, mode)],
  ['makeDirsSync', (path: string, mode?: number) => Promise.resolve().then(() => makeDirsSync(path, mode))],
] as const;

describe.each(variants)('%s', (_name, make) => {
  it('makes every missing level with the mode, and is a no-op where the folder exists', async () => {
    const deep = join(dir, 'a', 'b', 'c');
    await make(deep, 0o700);
    for (const level of [join(dir, 'a'), join(dir, 'a', 'b'), deep]) {
      const s = await stat(level);
      expect(s.isDirectory()).toBe(true);
      expect(s.mode & 0o777).toBe(0o700);
    }
    await make(deep, 0o700);
    await make(join(dir, 'a'), 0o700);
    expect((await stat(deep)).isDirectory()).toBe(true);
  });

  it('accepts a link to a folder, as mkdir -p does', async () => {
    await mkdir(join(dir, 'real'));
    await symlink(join(dir, 'real'), join(dir, 'link'));
    await make(join(dir, 'link'));
    await make(join(dir, 'link', 'inside'));
    expect((await stat(join(dir, 'real', 'inside'))).isDirectory()).toBe(true);
  });

  it('refuses a file where a folder should be (EEXIST at the end, ENOTDIR on the way)', async () => {
    await writeFile(join(dir, 'file'), '');
    await expect(make(join(dir, 'file'))).rejects.toMatchObject({ code: 'EEXIST' });
    await expect(make(join(dir, 'file', 'below'))).rejects.toMatchObject({ code: 'ENOTDIR' });
  });

  it('ends with an error under /proc, where a folder cannot be made (Node’s recursive mkdir never returns there)', async () => {
    await expect(make('/proc/.roboguide-make-dirs-test/state/roboguide-eval')).rejects.toMatchObject({
      code: 'ENOENT',
    });
  });
});
