import { mkdir, mkdtemp, open, readFile, rm, unlink, writeFile, type FileHandle } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  cgroupProcsFiles,
  deletedMappings,
  diskDevices,
  ProcOpenFiles,
} from '../../../../src/adapters/fs/proc-open-files.js';
import { readFileSync, statSync } from 'node:fs';

const BUDGET = { maxEntries: 100_000, maxMs: 10_000 };
/** This process as the scan's "container": its id is text its own cgroup file holds (its first line). */
async function self(): Promise<{ id: string; pid: number }> {
  return { id: (await readFile('/proc/self/cgroup', 'utf8')).split('\n')[0]!, pid: process.pid };
}
const MIB = 1024 * 1024;

describe('ProcOpenFiles on this process (the real /proc, its cgroup listing only this process)', () => {
  let dir: string | undefined;
  const handles: FileHandle[] = [];
  afterEach(async () => {
    for (const h of handles.splice(0)) await h.close();
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  /** A cgroup root whose every controller's group of this process lists only this process. */
  async function ownCgroup(): Promise<string> {
    const root = join(dir!, 'cgroup');
    for (const file of cgroupProcsFiles(await readFile('/proc/self/cgroup', 'utf8'), root)) {
      await mkdir(join(file, '..'), { recursive: true });
      await writeFile(file, `${process.pid}\n`);
    }
    return root;
  }

  it('counts a deleted file held open once (two descriptors), never a file that still has a name', async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-open-files-'));
    const scan = new ProcOpenFiles({ proc: '/proc', cgroup: await ownCgroup() });
    const before = await scan.unlinkedOpenFiles(await self(), BUDGET);
    expect(before.complete).toBe(true);
    const hidden = join(dir, 'hidden');
    const named = join(dir, 'named');
    await writeFile(hidden, Buffer.alloc(4 * MIB, 1));
    await writeFile(named, Buffer.alloc(2 * MIB, 1));
    // A deleted file in a tmpfs is memory (bounded by the memory limit), not disk: never counted.
    const inMemory = join('/dev/shm', `rg-open-files-${process.pid}`);
    await writeFile(inMemory, Buffer.alloc(MIB, 1));
    handles.push(
      await open(hidden, 'r'),
      await open(hidden, 'r'),
      await open(named, 'r'),
      await open(inMemory, 'r'),
    );
    await unlink(hidden);
    await unlink(inMemory);
    const after = await scan.unlinkedOpenFiles(await self(), BUDGET);
    expect(after.complete).toBe(true);
    expect(after.files - before.files).toBe(1);
    const added = after.bytes - before.bytes;
    expect(added).toBeGreaterThanOrEqual(4 * MIB);
    expect(added).toBeLessThan(4 * MIB + 64 * 1024);
  });

  it('is incomplete when the budget runs out', async () => {
    const scan = new ProcOpenFiles({ proc: '/proc', cgroup: await ownCgroup() });
    for (let i = 0; i < 300; i++) handles.push(await open('/dev/null', 'r'));
    expect((await scan.unlinkedOpenFiles(await self(), { maxEntries: 256, maxMs: 10_000 })).complete).toBe(
      false,
    );
  });

  it("is unavailable, naming why, where no scan can run: not root, or a pid that is not the container's here (a remote engine's, one that ended), never scanned", async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-open-files-'));
    const scan = new ProcOpenFiles({ proc: '/proc', cgroup: await ownCgroup() }, () => 0);
    const missing = new ProcOpenFiles({ proc: join(dir, 'no-proc'), cgroup: join(dir, 'cgroup') }, () => 0);
    expect(await missing.unlinkedOpenFiles({ id: 'c1', pid: 1 }, BUDGET)).toMatchObject({
      complete: true,
      bytes: 0,
      entries: 0,
      unavailable: expect.stringContaining('pid 1 is not a process of the container'),
    });
    const foreign = await scan.unlinkedOpenFiles({ id: 'not-this-container', pid: process.pid }, BUDGET);
    expect(foreign).toMatchObject({ complete: true, entries: 0, unavailable: expect.any(String) });
    const notRoot = new ProcOpenFiles({ proc: '/proc', cgroup: await ownCgroup() }, () => 1000);
    expect(await notRoot.unlinkedOpenFiles(await self(), BUDGET)).toMatchObject({
      entries: 0,
      unavailable: expect.stringContaining('not root'),
    });
  });
});

describe('reading /proc texts', () => {
  it("finds a process's cgroup.procs under cgroup v1's pids controller first, then v2", () => {
    const text = '8:pids:/docker/abc\n4:memory:/docker/abc\n0::/docker/abc\n1:name=systemd:/../x\n';
    expect(cgroupProcsFiles(text, '/cg')).toEqual([
      '/cg/pids/docker/abc/cgroup.procs',
      '/cg/docker/abc/cgroup.procs',
      '/cg/unified/docker/abc/cgroup.procs',
    ]);
  });

  it('takes the devices of disk-backed mounts from mountinfo, as stat reports them, never a tmpfs', () => {
    const mountinfo = [
      '27 1 254:0 / / rw,relatime - ext4 /dev/vda rw',
      '300 27 0:53 / /var/lib/docker/overlay2/x/merged rw - overlay overlay rw,lowerdir=a',
      '301 27 0:54 / /dev/shm rw - tmpfs shm rw',
      '302 27 259:300 / /big rw - xfs /dev/nvme0n1p300 rw',
    ].join('\n');
    // 254:0 → 254 << 8; 0:53 → 53; 259:300 → (300 & 0xff) | 259 << 8 | (300 & ~0xff) << 12.
    expect([...diskDevices(mountinfo)]).toEqual([65_024, 53, 44 + 66_304 + 1_048_576]);
    // This host's own: the root's device as stat gives it.
    expect(diskDevices(readFileSync('/proc/self/mountinfo', 'utf8')).has(statSync('/').dev)).toBe(true);
  });

  it('names the mappings of deleted files, not of anonymous memory or named files', () => {
    const maps = [
      '7f0000000000-7f0000100000 rw-s 00000000 08:01 1234 /tmp/held (deleted)',
      '7f0000100000-7f0000200000 r--p 00000000 08:01 99 /lib/libc.so',
      '7f0000200000-7f0000300000 rw-p 00000000 00:00 0 ',
    ].join('\n');
    expect(deletedMappings(maps)).toEqual(['7f0000000000-7f0000100000']);
  });
});
