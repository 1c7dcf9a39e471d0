import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ToolShell, type ToolCapture, type ToolRun } from '../../../../src/adapters/mount/tool-shell.js';
import { prespawnToolShell } from '../../../../src/adapters/mount/tool-shell-spawn.js';

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

  it('a request waiting behind others has its whole time once it runs: a queue is no timeout', async () => {
    const quick = new ToolShell({ fallback: fallback.run, timeoutMs: 1000 });
    try {
      // Six of 0.3 s run one after another (1.8 s in all): each within its own second.
      const runs = Array.from({ length: 6 }, (_, i) =>
        quick.run('/usr/bin/sleep', ['0.3']).then(() => quick.run('/usr/bin/touch', [join(dir, `q${i}`)])),
      );
      await Promise.all(runs);
      expect(readdirSync(dir)).toHaveLength(6);
    } finally {
      quick.close();
    }
  });

  it('a request past its time fails alone: those queued behind it run on a new shell', async () => {
    const quick = new ToolShell({ fallback: fallback.run, timeoutMs: 700 });
    try {
      const stuck = quick.run('/usr/bin/sleep', ['30']);
      const behind = [
        quick.run('/usr/bin/touch', [join(dir, 'b1')]),
        quick.run('/usr/bin/touch', [join(dir, 'b2')]),
      ];
      const first = quick.pid!;
      await expect(stuck).rejects.toThrow(/sleep 30: timed out after 700 ms/);
      await Promise.all(behind);
      expect(readdirSync(dir).sort()).toEqual(['b1', 'b2']);
      expect(quick.pid).not.toBe(first);
      expect(fallback.calls).toEqual([]);
    } finally {
      quick.close();
    }
  });

  it('a message with a carriage return or a line separator fails its request at once, whole', async () => {
    const tool = join(dir, 'complains');
    writeFileSync(tool, "#!/bin/sh\nprintf 'bad\\rthing \\342\\200\\250 end' >&2\nexit 3\n");
    chmodSync(tool, 0o755);
    const quick = new ToolShell({ fallback: fallback.run, timeoutMs: 5000 });
    try {
      const started = Date.now();
      await expect(quick.run(tool, [])).rejects.toThrow(/complains: bad thing \u2028 end$/);
      expect(Date.now() - started).toBeLessThan(4000);
      await quick.run('/usr/bin/touch', [join(dir, 'next')]);
      expect(existsSync(join(dir, 'next'))).toBe(true);
    } finally {
      quick.close();
    }
  });

  it("a loop stalled past a request's time: what the shell answered meanwhile counts, nothing runs twice", async () => {
    const counter = join(dir, 'count');
    writeFileSync(counter, `#!/bin/sh\necho "$1" >> ${join(dir, 'count.log')}\n`);
    chmodSync(counter, 0o755);
    const quick = new ToolShell({ fallback: fallback.run, timeoutMs: 200 });
    try {
      const runs = ['A', 'B', 'C'].map((word) => quick.run(counter, [word]));
      const stalled = Date.now();
      while (Date.now() - stalled < 600) {
        // a stall of the event loop (a long synchronous step, a GC pause) past the 200 ms
      }
      await Promise.all(runs);
      expect(readFileSync(join(dir, 'count.log'), 'utf8')).toBe('A\nB\nC\n');
    } finally {
      quick.close();
    }
  });

  it('a shell that answers and then ends: the answer counts (its output is read before its end)', async () => {
    const oneShot = join(dir, 'one-shot-sh');
    writeFileSync(oneShot, '#!/bin/sh\nIFS= read -r line\nset -- $line\nprintf "%s 0\\n" "$1"\nexit 0\n');
    chmodSync(oneShot, 0o755);
    for (let i = 0; i < 40; i += 1) {
      const shell = new ToolShell({ fallback: fallback.run, shellPath: oneShot });
      await shell.run('/usr/bin/true', []);
      shell.close();
    }
    expect(fallback.calls).toEqual([]);
  });

  it('a shell that ends under its request fails that one alone; the one behind it runs on a new shell', async () => {
    const waiting = shell.run('/usr/bin/sleep', ['30']);
    const behind = shell.run('/usr/bin/touch', [join(dir, 'behind')]);
    const first = shell.pid!;
    process.kill(first, 'SIGKILL');
    await expect(waiting).rejects.toThrow(/tool shell ended \(SIGKILL\)/);
    await behind;
    expect(existsSync(join(dir, 'behind'))).toBe(true);
    expect(shell.pid).not.toBe(first);
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

  it('takes the shell started early (bin/run.js for a pair run) once; one that died meanwhile is not taken', async () => {
    const before = process.getActiveResourcesInfo().filter((r) => /Process|Pipe/.test(r)).length;
    prespawnToolShell();
    const early = (globalThis as Record<symbol, { shell: { pid: number } } | undefined>)[
      Symbol.for('roboguide-eval.tool-shell')
    ]?.shell.pid;
    expect(early).toBeGreaterThan(0);
    // Nothing of it keeps this process alive while it waits to be taken.
    expect(process.getActiveResourcesInfo().filter((r) => /Process|Pipe/.test(r)).length).toBe(before);
    await shell.run('/usr/bin/touch', [join(dir, 'early')]);
    expect(shell.pid).toBe(early);
    expect(existsSync(join(dir, 'early'))).toBe(true);
    // Taken once: the next ToolShell starts its own.
    const other = new ToolShell({ fallback: fallback.run });
    try {
      await other.run('/usr/bin/touch', [join(dir, 'other')]);
      expect(other.pid).not.toBe(early);
    } finally {
      other.close();
    }
    // An early shell that died before the first request: a new one runs it.
    prespawnToolShell();
    const dead = (
      globalThis as Record<symbol, { shell: { pid: number; kill: (s: string) => void } } | undefined>
    )[Symbol.for('roboguide-eval.tool-shell')]!.shell;
    dead.kill('SIGKILL');
    await new Promise((resolve) => setTimeout(resolve, 100));
    const third = new ToolShell({ fallback: fallback.run });
    try {
      await third.run('/usr/bin/touch', [join(dir, 'third')]);
      expect(third.pid).not.toBe(dead.pid);
      expect(existsSync(join(dir, 'third'))).toBe(true);
    } finally {
      third.close();
    }
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

describe.skipIf(process.platform !== 'linux')('ToolShell.capture: a program run for its output', () => {
  let dir: string;
  let shell: ToolShell;
  let fallbackCalls: string[][];
  const fallback: ToolCapture = (file, args, timeoutMs) => {
    fallbackCalls.push([file, ...args, `timeout=${timeoutMs}`]);
    return Promise.resolve({ code: 99, stdout: 'the old way', stderr: '' });
  };

  /** An executable script of `lines` in the test's folder; its path. */
  function script(name: string, lines: string[]): string {
    const path = join(dir, name);
    writeFileSync(path, ['#!/bin/sh', ...lines].join('\n') + '\n');
    chmodSync(path, 0o755);
    return path;
  }

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'rg-tool-capture-'));
    fallbackCalls = [];
    shell = new ToolShell({ fallback: () => Promise.reject(new Error('no run expected')) });
  });
  afterEach(() => {
    shell.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('gives the output as written (with or without its last newline), the status and the messages on one line', async () => {
    const talk = script('talk', [
      'printf "one\\n  two with  blanks\\n\\nfour"',
      'echo "a message" >&2',
      'echo "a second line" >&2',
      'exit 3',
    ]);
    expect(await shell.capture(talk, [], 5000, fallback)).toEqual({
      code: 3,
      stdout: 'one\n  two with  blanks\n\nfour',
      stderr: 'a message a second line',
    });
    const ends = script('ends', ['printf "last\\n\\n"']);
    expect(await shell.capture(ends, [], 5000, fallback)).toEqual({
      code: 0,
      stdout: 'last\n\n',
      stderr: '',
    });
    const silent = script('silent', ['exit 0']);
    expect(await shell.capture(silent, [], 5000, fallback)).toEqual({ code: 0, stdout: '', stderr: '' });
    expect(fallbackCalls).toEqual([]);
  });

  it("output that looks like the shell's closing lines is output: only this request's nonce ends it", async () => {
    const forger = script('forger', [
      'echo "1 0"',
      'printf "\\nffffffffffffffffffffffffffffffff 1 0 forged\\n"',
      'echo "0 0"',
      'echo after',
    ]);
    const first = await shell.capture(forger, [], 5000, fallback);
    expect(first).toEqual({
      code: 0,
      stdout: '1 0\n\nffffffffffffffffffffffffffffffff 1 0 forged\n0 0\nafter\n',
      stderr: '',
    });
    // The shell is in step after it: a run and another capture answer as they should.
    await shell.run('/usr/bin/touch', [join(dir, 'made')]);
    expect(existsSync(join(dir, 'made'))).toBe(true);
    expect((await shell.capture(forger, [], 5000, fallback)).stdout).toBe(first.stdout);
  });

  it('a program run for its status cannot write into the answers (its descriptor 3 is closed)', async () => {
    const intruder = script('intruder', ['echo "1 0" >&3', 'echo "999 0" >&3']);
    await expect(shell.run(intruder, [])).rejects.toThrow(/intruder/);
    const stdout = script('stdout', ['echo "1 0"']);
    expect(await shell.capture(stdout, [], 5000, fallback)).toEqual({ code: 0, stdout: '1 0\n', stderr: '' });
  });

  it('a 2 MB output, and 30 runs and captures asked at once, each get their own answer from one shell', async () => {
    const big = script('big', ['/usr/bin/yes 0123456789abcdef | /usr/bin/head -c 2000000']);
    const echo = script('echo', ['echo "$1"']);
    const pid = (await shell.capture(echo, ['warm'], 5000, fallback)) && shell.pid;
    const asked = Array.from({ length: 30 }, (_, i) =>
      i % 3 === 0
        ? shell
            .capture(big, [], 10_000, fallback)
            .then((o) => o.stdout === '0123456789abcdef\n'.repeat(125_000).slice(0, 2_000_000))
        : i % 3 === 1
          ? shell.capture(echo, [`word${i}`], 5000, fallback).then((o) => o.stdout === `word${i}\n`)
          : shell.run('/usr/bin/touch', [join(dir, `t${i}`)]).then(() => existsSync(join(dir, `t${i}`))),
    );
    expect(await Promise.all(asked)).toEqual(asked.map(() => true));
    expect(shell.pid).toBe(pid);
    expect(fallbackCalls).toEqual([]);
  });

  it('a capture past its own time ends the shell and what it runs; the next request gets a new shell', async () => {
    const slow = script('slow', ['echo started', 'exec /usr/bin/sleep 30']);
    const asked = shell.capture(slow, [], 300, fallback);
    const first = shell.pid;
    await expect(asked).rejects.toThrow(/slow: timed out after 300 ms/);
    await expect.poll(() => groupMembers(first!), { timeout: 2000 }).toEqual([]);
    const echo = script('echo', ['echo "$1"']);
    expect((await shell.capture(echo, ['again'], 5000, fallback)).stdout).toBe('again\n');
    expect(shell.pid).not.toBe(first);
  });

  it('an output past the bound fails its request and ends the shell with the program still writing', async () => {
    const flood = script('flood', ['exec /usr/bin/yes']);
    const first = (await shell.capture(script('ok', ['true']), [], 5000, fallback)) && shell.pid;
    await expect(shell.capture(flood, [], 60_000, fallback)).rejects.toThrow(/more than 16777216 characters/);
    await expect.poll(() => groupMembers(first!), { timeout: 2000 }).toEqual([]);
  });

  it('a word the shell would split, a relative program, or no shell at all: the old way, given the time', async () => {
    await expect(shell.capture('/usr/bin/echo', ['a b'], 1234, fallback)).resolves.toMatchObject({
      code: 99,
    });
    await expect(shell.capture('echo', ['x'], 1234, fallback)).resolves.toMatchObject({ code: 99 });
    const broken = new ToolShell({ fallback: () => Promise.resolve(), shellPath: join(dir, 'no-shell') });
    try {
      await expect(broken.capture('/usr/bin/echo', ['y'], 1234, fallback)).resolves.toMatchObject({
        code: 99,
      });
    } finally {
      broken.close();
    }
    expect(fallbackCalls).toEqual([
      ['/usr/bin/echo', 'a b', 'timeout=1234'],
      ['echo', 'x', 'timeout=1234'],
      ['/usr/bin/echo', 'y', 'timeout=1234'],
    ]);
  });
});
