import { chmod, lstat, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PrivilegeSweeper } from '../../../../src/adapters/fs/privilege-sweeper.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-sweep-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function file(path: string, mode: number): Promise<void> {
  await writeFile(path, 'x');
  await chmod(path, mode);
}

const modeOf = async (path: string | Buffer): Promise<number> => (await lstat(path)).mode & 0o7777;

describe('the second line: setuid/setgid bits cleared under a pair folder', () => {
  it('clears both bits on regular files at any depth, keeps the other bits, reports each path once', async () => {
    const root = join(dir, 'cwd');
    await mkdir(join(root, 'a', 'b'), { recursive: true });
    await file(join(root, 'suid'), 0o4755);
    await file(join(root, 'a', 'b', 'sgid'), 0o2711);
    await file(join(root, 'a', 'plain'), 0o750);
    const report = await new PrivilegeSweeper().strip([root, root]);
    expect(report.complete).toBe(true);
    expect([...report.stripped].sort()).toEqual([join(root, 'a', 'b', 'sgid'), join(root, 'suid')]);
    expect(await modeOf(join(root, 'suid'))).toBe(0o755);
    expect(await modeOf(join(root, 'a', 'b', 'sgid'))).toBe(0o711);
    expect(await modeOf(join(root, 'a', 'plain'))).toBe(0o750);
  });

  it('never follows a link: a setuid file outside, reached through a link to it or to its folder, keeps its bit', async () => {
    const root = join(dir, 'cwd');
    const outside = join(dir, 'outside');
    await mkdir(root);
    await mkdir(outside);
    await file(join(outside, 'host-su'), 0o4755);
    await symlink(join(outside, 'host-su'), join(root, 'to-file'));
    await symlink(outside, join(root, 'to-folder'));
    expect(await new PrivilegeSweeper().strip([root])).toEqual({ stripped: [], complete: true });
    expect(await modeOf(join(outside, 'host-su'))).toBe(0o4755);
  });

  it('never reaches a folder through a link on the way to it: an ancestor of the cwd swapped for a link (by a pair whose cwd holds it, once this one ended) is refused, the host folder it points to keeps its bits', async () => {
    // The host's setuid programs (a /usr/bin stand-in): a link in place of the cwd's parent must not turn the
    // root's sweep onto them.
    const host = join(dir, 'usr-bin');
    await mkdir(join(host, 'cwd'), { recursive: true });
    await file(join(host, 'cwd', 'sudo'), 0o4755);
    await file(join(host, 'passwd'), 0o4755);
    const ws = join(dir, 'ws');
    await symlink(host, ws);
    const report = await new PrivilegeSweeper().strip([join(ws, 'cwd')]);
    expect(report).toEqual({ stripped: [], complete: false });
    expect(await modeOf(join(host, 'cwd', 'sudo'))).toBe(0o4755);
    expect(await modeOf(join(host, 'passwd'))).toBe(0o4755);
  });

  it('walks names that are not UTF-8, and leaves a setgid folder alone (its bit only passes its group on)', async () => {
    const root = join(dir, 'cwd');
    await mkdir(join(root, 'shared'), { recursive: true });
    await chmod(join(root, 'shared'), 0o2775);
    const name = Buffer.concat([Buffer.from(`${root}/`), Buffer.from([0x66, 0xff, 0xfe])]);
    await writeFile(name, 'x');
    await chmod(name, 0o4755);
    const report = await new PrivilegeSweeper().strip([root]);
    expect(report.stripped).toHaveLength(1);
    expect(await modeOf(name)).toBe(0o755);
    expect(await modeOf(join(root, 'shared'))).toBe(0o2775);
  });

  it('a missing folder is nothing to sweep', async () => {
    expect(await new PrivilegeSweeper().strip([join(dir, 'absent')])).toEqual({
      stripped: [],
      complete: true,
    });
  });
});
