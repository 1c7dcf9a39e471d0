// Staged mounts (docs/spec.md 5.3) made with one mount(8) per source (issue 39): the bind and its flags in one call,
// then the flags read back from the kernel (/proc/self/mountinfo). Needs root and mount(8) (the host lets us bind);
// skipped visibly otherwise.
import { existsSync } from 'node:fs';
import {
  chmod,
  lstat,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  rm,
  stat,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  mountFlagsProblem,
  probeFacts,
  ProcFdMountStager,
  runTool,
} from '../../src/adapters/mount/proc-fd-stager.js';
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
    expect(await readdir(root)).toEqual([]);
  });
});

describe.skipIf(notRoot)(
  'the staging probe: its answer kept for later processes with the facts it depends on',
  () => {
    let base: string;
    let root: string;
    beforeAll(async () => {
      base = await mkdtemp(join(tmpdir(), 'rg-staging-probe-'));
      root = join(base, 'staging');
    });
    afterAll(async () => {
      await rm(base, { recursive: true, force: true });
    });
    const record = () => join(root, 'staged-probe');
    const mounts = (calls: string[][]) => calls.filter(([file]) => file === 'mount' || file === 'umount');

    it("probes once (a bind and its release), keeps the answer 0600 with this process's facts, and a later stager takes it without a mount(8)", async () => {
      const first = stagerWith(root);
      expect(await first.stager.mode()).toBe('staged');
      expect(mounts(first.calls).map(([file]) => file)).toEqual(['mount', 'umount']);
      expect(await readFile(record(), 'utf8')).toBe(probeFacts());
      expect((await stat(record())).mode & 0o777).toBe(0o600);
      const second = stagerWith(root);
      expect(await second.stager.mode()).toBe('staged');
      expect(mounts(second.calls)).toEqual([]);
      // No probe folder and no point left behind.
      expect((await readdir(root)).sort()).toEqual(['staged-probe']);
    });

    it('a record of other facts (another boot, namespace, capability set or mount(8)) is probed again and rewritten', async () => {
      await writeFile(record(), (probeFacts() ?? '').replace(/"boot":"[^"]*"/, '"boot":"another-boot"'), {
        mode: 0o600,
      });
      const { stager, calls } = stagerWith(root);
      expect(await stager.mode()).toBe('staged');
      expect(mounts(calls).map(([file]) => file)).toEqual(['mount', 'umount']);
      expect(await readFile(record(), 'utf8')).toBe(probeFacts());
    });

    it('a record others can read or write, or a link to one, is not taken: probed again, and replaced by a file of ours', async () => {
      const elsewhere = join(base, 'elsewhere');
      await writeFile(elsewhere, probeFacts() ?? '', { mode: 0o600 });
      await rm(record(), { force: true });
      await symlink(elsewhere, record());
      const linked = stagerWith(root);
      expect(await linked.stager.mode()).toBe('staged');
      expect(mounts(linked.calls)).toHaveLength(2);
      expect((await lstat(record())).isFile()).toBe(true);
      await chmod(record(), 0o644);
      const open = stagerWith(root);
      expect(await open.stager.mode()).toBe('staged');
      expect(mounts(open.calls)).toHaveLength(2);
      expect((await stat(record())).mode & 0o777).toBe(0o600);
    });

    it('a probe that fails says walked and removes the record: the next process probes again', async () => {
      expect(existsSync(record())).toBe(true);
      const refused = stagerWith(root, (file) =>
        file === 'mount' ? Promise.reject(new Error('mount: permission denied')) : Promise.resolve(),
      );
      // The record's facts differ from this process's (as after a capability was dropped): the probe runs, and fails.
      await writeFile(record(), 'other facts', { mode: 0o600 });
      expect(await refused.stager.mode()).toBe('walked');
      expect(existsSync(record())).toBe(false);
      const next = stagerWith(root);
      expect(await next.stager.mode()).toBe('staged');
      expect(mounts(next.calls)).toHaveLength(2);
    });
  },
);

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
