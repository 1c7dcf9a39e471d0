import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ToolShell, type ToolRun } from '../../../../src/adapters/mount/tool-shell.js';

/** The fallback: records what it was asked and does nothing. */
function recordingFallback(): { run: ToolRun; calls: string[][] } {
  const calls: string[][] = [];
  return {
    calls,
    run: (file, args) => {
      calls.push([file, ...args]);
      return Promise.resolve();
    },
  };
}

/** Whether a process with this pid lives (not a zombie). */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/** Processes whose process group is `pgid`. */
function groupMembers(pgid: number): number[] {
  return readdirSync('/proc')
    .filter((e) => /^\d+$/.test(e))
    .filter((pid) => {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        return Number(fields[2]) === pgid && fields[0] !== 'Z';
      } catch {
        return false;
      }
    })
    .map(Number);
}

describe.skipIf(process.platform !== 'linux')('ToolShell: one shell runs the tools', () => {
  let dir: string;
  let shell: ToolShell;
  let fallback: ReturnType<typeof recordingFallback>;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'rg-tool-shell-'));
    fallback = recordingFallback();
    shell = new ToolShell({ fallback: fallback.run });
  });
  afterEach(() => {
    shell.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('runs the program with its arguments and resolves on status 0', async () => {
    await shell.run('/usr/bin/touch', [join(dir, 'made')]);
    expect(existsSync(join(dir, 'made'))).toBe(true);
    expect(fallback.calls).toEqual([]);
  });

  it("rejects a non-zero status with the program's own message (C locale), naming the command", async () => {
    const missing = join(dir, 'no-such-thing');
    await expect(shell.run('/usr/bin/ls', [missing])).rejects.toThrow(
      new RegExp(`^/usr/bin/ls ${missing}: .*No such file or directory`),
    );
    // The shell survives a failed request.
    await shell.run('/usr/bin/touch', [join(dir, 'after')]);
    expect(existsSync(join(dir, 'after'))).toBe(true);
  });

  it('answers 60 concurrent requests, each its own, from one shell', async () => {
    const names = Array.from({ length: 60 }, (_, i) => `f${i}`);
    const results = await Promise.allSettled(
      names.map((name, i) =>
        i % 3 === 2
          ? shell.run('/usr/bin/ls', [join(dir, 'missing', name)])
          : shell.run('/usr/bin/touch', [join(dir, name)]),
      ),
    );
    results.forEach((result, i) => {
      if (i % 3 === 2) {
        expect(result.status).toBe('rejected');
        expect(String((result as PromiseRejectedResult).reason)).toContain(`missing/f${i}`);
      } else expect(result.status).toBe('fulfilled');
    });
    expect(readdirSync(dir).sort()).toEqual(names.filter((_, i) => i % 3 !== 2).sort());
    expect(fallback.calls).toEqual([]);
  });

  it('hands a word the shell would split or expand to the fallback, never to the shell', async () => {
    for (const word of ['a b', 'a*', '$(touch x)', 'a;b', "a'b", 'a\nb', 'a\\b']) {
      await shell.run('/usr/bin/touch', [join(dir, word)]);
    }
    await shell.run('/usr/bin/touch', ['']);
    await shell.run('relative-program', ['x']);
    expect(fallback.calls).toHaveLength(9);
    expect(shell.pid).toBeNull();
    expect(readdirSync(dir)).toEqual([]);
  });

  it("gives the shell a fixed environment: none of the caller's (BASH_ENV, PATH)", async () => {
    process.env['BASH_ENV'] = join(dir, 'planted');
    try {
      // printenv exits 1 for a variable that is not set.
      await expect(shell.run('/usr/bin/printenv', ['BASH_ENV'])).rejects.toThrow(/exit status 1/);
      await shell.run('/usr/bin/printenv', ['LC_ALL']);
    } finally {
      delete process.env['BASH_ENV'];
    }
  });

  it('a request past its time ends the shell and what it runs; the next request gets a new shell', async () => {
    const quick = new ToolShell({ fallback: fallback.run, timeoutMs: 300 });
    try {
      const slow = quick.run('/usr/bin/sleep', ['30']);
      const first = quick.pid;
      expect(first).not.toBeNull();
      await expect(slow).rejects.toThrow(/timed out after 300 ms/);
      await expect.poll(() => groupMembers(first!), { timeout: 2000 }).toEqual([]);
      await quick.run('/usr/bin/touch', [join(dir, 'again')]);
      expect(existsSync(join(dir, 'again'))).toBe(true);
      expect(quick.pid).not.toBe(first);
    } finally {
      quick.close();
    }
  });

  it('a shell killed from outside fails what it was asked; the next request gets a new shell', async () => {
    const waiting = shell.run('/usr/bin/sleep', ['30']);
    const first = shell.pid!;
    process.kill(first, 'SIGKILL');
    await expect(waiting).rejects.toThrow(/tool shell ended \(SIGKILL\)/);
    await shell.run('/usr/bin/touch', [join(dir, 'after-kill')]);
    expect(existsSync(join(dir, 'after-kill'))).toBe(true);
    expect(shell.pid).not.toBe(first);
    expect(alive(first)).toBe(false);
  });

  it('keeps nothing of this process alive once idle (only a pending request holds the loop)', async () => {
    const before = process.getActiveResourcesInfo().filter((r) => /Process|Pipe/.test(r)).length;
    await shell.run('/usr/bin/touch', [join(dir, 'x')]);
    expect(shell.pid).not.toBeNull();
    const after = process.getActiveResourcesInfo().filter((r) => /Process|Pipe/.test(r)).length;
    expect(after).toBe(before);
  });

  it('a shell that cannot be started sends every request to the fallback', async () => {
    const broken = new ToolShell({ fallback: fallback.run, shellPath: join(dir, 'no-shell') });
    try {
      await broken.run('/usr/bin/touch', [join(dir, 'y')]);
      await broken.run('/usr/bin/touch', [join(dir, 'z')]);
      expect(fallback.calls).toEqual([
        ['/usr/bin/touch', join(dir, 'y')],
        ['/usr/bin/touch', join(dir, 'z')],
      ]);
      expect(broken.pid).toBeNull();
    } finally {
      broken.close();
    }
  });
});
