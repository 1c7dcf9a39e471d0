// Staged mounts (docs/spec.md 5.3) made with one mount(8) per source (issue 39): the bind and its flags in one call,
// then the flags read back from the kernel (/proc/self/mountinfo). Needs root and mount(8) (the host lets us bind);
// skipped visibly otherwise.
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mountFlagsProblem, ProcFdMountStager, runTool } from '../../src/adapters/mount/proc-fd-stager.js';
import type { OpenedFolder } from '../../src/app/ports/mount-stager.js';

const notRoot = process.getuid?.() !== 0;

/** The stager, the mount(8)/umount(8) calls it made, and a folder of ours opened through it. */
function stagerWith(root: string, run = runTool) {
  const calls: string[][] = [];
  const stager = new ProcFdMountStager({
    root,
    referencedSources: () => Promise.resolve(new Set()),
    run: (file, args) => {
      calls.push([file, ...args]);
      return run(file, args);
    },
  });
  return { stager, calls };
}

async function open(stager: ProcFdMountStager, path: string): Promise<OpenedFolder> {
  let parent = await stager.openRoot();
  for (const name of path.split('/').filter((s) => s !== '')) {
    const child = await stager.openChild(parent, name);
    await stager.close(parent);
    if (child.kind !== 'opened') throw new Error(`cannot open ${name}: ${child.kind}`);
    parent = child.folder;
  }
  return parent;
}

describe.skipIf(notRoot)('staged mounts: one mount(8) per source, flags read back from the kernel', () => {
  let base: string;
  let source: string;
  let root: string;
  beforeAll(async () => {
    base = await mkdtemp(join(tmpdir(), 'rg-staging-flags-'));
    source = join(base, 'src');
    await mkdir(source);
    await writeFile(join(source, 'f'), 'x');
    // A root of our own (never the host's /run/roboguide-eval): what a real root gets, 0700 and ours.
    root = join(base, 'staging');
  });
  afterAll(async () => {
    await rm(base, { recursive: true, force: true });
  });

  it('read-only: one mount(8), the kernel says ro,nosuid,nodev, a write is refused, release leaves nothing', async () => {
    const { stager, calls } = stagerWith(root);
    const folder = await open(stager, source);
    const point = await stager.bind(folder, true);
    await stager.close(folder);
    try {
      expect(calls.filter(([file]) => file === 'mount')).toHaveLength(1);
      const info = await readFile('/proc/self/mountinfo', 'utf8');
      expect(mountFlagsProblem(info, point, true)).toBeNull();
      expect(await readFile(join(point, 'f'), 'utf8')).toBe('x');
      await expect(writeFile(join(point, 'g'), 'y')).rejects.toMatchObject({ code: 'EROFS' });
    } finally {
      await stager.release(point);
    }
    expect(existsSync(point)).toBe(false);
    expect(mountFlagsProblem(await readFile('/proc/self/mountinfo', 'utf8'), point, false)).toBe(
      'not mounted',
    );
  });

  it('writable: one mount(8), nosuid,nodev and not ro; a write lands in the source', async () => {
    const { stager, calls } = stagerWith(root);
    const folder = await open(stager, source);
    const point = await stager.bind(folder, false);
    await stager.close(folder);
    try {
      expect(calls.filter(([file]) => file === 'mount')).toHaveLength(1);
      const info = await readFile('/proc/self/mountinfo', 'utf8');
      expect(mountFlagsProblem(info, point, false)).toBeNull();
      expect(mountFlagsProblem(info, point, true)).toMatch(/without ro/);
      await writeFile(join(point, 'w'), 'z');
      expect(await readFile(join(source, 'w'), 'utf8')).toBe('z');
    } finally {
      await stager.release(point);
    }
    expect(existsSync(point)).toBe(false);
  });

  it('a mount(8) that binds but drops the flags: refused, the bind undone, no point left', async () => {
    // What an old mount(8) that ignores `-o` on a bind would do: the bind alone.
    const flagless = (file: string, args: readonly string[]) => {
      const o = args.indexOf('-o');
      return runTool(file, o === -1 ? args : [...args.slice(0, o), ...args.slice(o + 2)]);
    };
    const { stager } = stagerWith(root, flagless);
    const folder = await open(stager, source);
    try {
      await expect(stager.bind(folder, true)).rejects.toThrow(/mounted without nosuid, nodev, ro/);
    } finally {
      await stager.close(folder);
    }
    const info = await readFile('/proc/self/mountinfo', 'utf8');
    expect(info).not.toContain(root);
    const { readdir } = await import('node:fs/promises');
    expect(await readdir(root)).toEqual([]);
  });
});

describe.skipIf(notRoot)('the sweep', () => {
  it("removes a probe's folder whose process is gone (killed in the middle of its probe), and keeps a live one's", async () => {
    const base = await mkdtemp(join(tmpdir(), 'rg-staging-sweep-'));
    try {
      const root = join(base, 'staging');
      await mkdir(root, { mode: 0o700 });
      const gone = join(root, `probe-${2 ** 31 - 2}`); // above any pid_max: no such process
      const live = join(root, `probe-${process.ppid}`);
      await mkdir(gone);
      await mkdir(live);
      const { stager } = stagerWith(root);
      await stager.sweep();
      expect(existsSync(gone)).toBe(false);
      expect(existsSync(live)).toBe(true);
    } finally {
      await rm(base, { recursive: true, force: true });
    }
  });
});

describe('mountFlagsProblem', () => {
  const line = (point: string, options: string) => `68 27 254:0 /src ${point} ${options} - ext4 /dev/vda rw`;
  it('reads the mount on top (the last line for that point), escaped as the kernel writes it', () => {
    const info = [
      line('/run/x/p 1'.replace(' ', '\\040'), 'rw,relatime'),
      line('/run/x/p\\0401', 'ro,nosuid,nodev'),
    ].join('\n');
    expect(mountFlagsProblem(info, '/run/x/p 1', true)).toBeNull();
    expect(mountFlagsProblem(line('/run/x/q', 'rw,nosuid'), '/run/x/q', false)).toBe(
      'mounted without nodev (rw,nosuid)',
    );
    expect(mountFlagsProblem(line('/run/x/q', 'rw'), '/run/x/qq', false)).toBe('not mounted');
  });
});
