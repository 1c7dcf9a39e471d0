import { chmod, lstat, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { checkedRecordsDir, serverRecordsDir, TestKitStateError } from '../../src/testing/state-dir.js';

const uid = process.getuid?.() ?? 0;
let base: string;
beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), 'rg-kit-state-'));
});
afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

describe("the test kit's state folder", () => {
  it('lives under $XDG_RUNTIME_DIR when set (absolute), else under the temp folder', () => {
    expect(serverRecordsDir({ XDG_RUNTIME_DIR: '/run/user/1000' })).toBe(
      `/run/user/1000/roboguide-testkit-${uid}/servers`,
    );
    expect(serverRecordsDir({ XDG_RUNTIME_DIR: 'relative' })).toBe(
      join(tmpdir(), `roboguide-testkit-${uid}`, 'servers'),
    );
  });

  it('is made one folder at a time, 0700 and ours; absent and not asked to make it: null', async () => {
    const env = { XDG_RUNTIME_DIR: base };
    expect(await checkedRecordsDir('absent', env)).toBeNull();
    const dir = await checkedRecordsDir('create', env);
    expect(dir).toBe(join(base, `roboguide-testkit-${uid}`, 'servers'));
    for (const path of [join(base, `roboguide-testkit-${uid}`), dir as string]) {
      const stat = await lstat(path);
      expect(stat.mode & 0o777).toBe(0o700);
      expect(stat.uid).toBe(uid);
    }
  });

  it('refuses a base that every user may write without the sticky bit (a folder in it could be swapped)', async () => {
    await chmod(base, 0o777);
    const err: unknown = await checkedRecordsDir('create', { XDG_RUNTIME_DIR: base }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(TestKitStateError);
    expect(String(err)).toMatch(/writable by every user without the sticky bit/);
  });
});
