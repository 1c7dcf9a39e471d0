import { spawn } from 'node:child_process';
import type * as NodeFs from 'node:fs';
import { readFileSync } from 'node:fs';
import { describe, expect, it, vi } from 'vitest';
import {
  currentProcessIdentity,
  isSameProcessAliveSync,
  readBootId,
  readProcessStartTicks,
} from '../../../src/adapters/host-identity.js';

function stateOf(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0] ?? null;
  } catch {
    return null;
  }
}

describe.skipIf(process.platform !== 'linux')('isSameProcessAliveSync', () => {
  it('a running process with the same start time is alive; another start time is not', async () => {
    const identity = {
      pid: process.pid,
      start_ticks: await readProcessStartTicks(process.pid),
      boot_id: await readBootId(),
    };
    expect(isSameProcessAliveSync(identity)).toBe(true);
    expect(isSameProcessAliveSync({ ...identity, start_ticks: '1' })).toBe(false);
  });

  it('a killed process its parent has not reaped yet (a zombie) is dead: a SIGKILLed supervisor must not hold its batch', async () => {
    // `sleep 30` (exec'd by the shell) never waits for its background child, which stays a zombie once it ends.
    const parent = spawn('sh', ['-c', 'sleep 0.2 & echo $!; exec sleep 30'], {
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    try {
      const pid = Number(
        (await new Promise<Buffer>((resolve) => parent.stdout.once('data', resolve))).toString().trim(),
      );
      const identity = { pid, start_ticks: await readProcessStartTicks(pid), boot_id: await readBootId() };
      expect(identity.start_ticks).not.toBeNull();
      for (let i = 0; i < 100 && stateOf(pid) !== 'Z'; i++) await new Promise((r) => setTimeout(r, 20));
      expect(stateOf(pid)).toBe('Z');
      expect(isSameProcessAliveSync(identity)).toBe(false);
    } finally {
      parent.kill('SIGKILL');
    }
  });
});

describe.skipIf(process.platform !== 'linux')('currentProcessIdentity', () => {
  it("is this process's pid, start time and boot, as /proc says; answered at once (no thread pool round trip), the same each time", async () => {
    const stat = readFileSync('/proc/self/stat', 'utf8');
    const expected = {
      pid: process.pid,
      start_ticks: stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19],
      boot_id: readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim(),
    };
    // Settled before anything queued behind it: a microtask, not a file read answered by libuv's pool.
    let settled = false;
    const asked = currentProcessIdentity().then((identity) => {
      settled = true;
      return identity;
    });
    await Promise.resolve();
    await Promise.resolve();
    expect(settled).toBe(true);
    expect(await asked).toEqual(expected);
    expect(await currentProcessIdentity()).toEqual(expected);
    expect(await readBootId()).toBe(expected.boot_id);
    expect(isSameProcessAliveSync(await currentProcessIdentity())).toBe(true);
  });
});

describe.skipIf(process.platform !== 'linux')('currentProcessIdentity after a failed read', () => {
  it('does not keep a read that failed (no descriptor left, say): the next call reads /proc again', async () => {
    vi.resetModules();
    let failing = true;
    vi.doMock('node:fs', async (original) => {
      const fs = await original<typeof NodeFs>();
      return {
        ...fs,
        readFileSync: ((path: string, ...rest: unknown[]) => {
          if (failing && path === `/proc/${process.pid}/stat`)
            throw Object.assign(new Error('EMFILE: too many open files'), { code: 'EMFILE' });
          return (fs.readFileSync as (...args: unknown[]) => unknown)(path, ...rest);
        }) as typeof fs.readFileSync,
      };
    });
    try {
      const fresh = await import('../../../src/adapters/host-identity.js');
      expect((await fresh.currentProcessIdentity()).start_ticks).toBeNull();
      failing = false;
      const stat = readFileSync('/proc/self/stat', 'utf8');
      expect((await fresh.currentProcessIdentity()).start_ticks).toBe(
        stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19],
      );
    } finally {
      vi.doUnmock('node:fs');
      vi.resetModules();
    }
  });
});
