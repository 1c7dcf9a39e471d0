import { spawn, type ChildProcessByStdio } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';

/**
 * mount(8) and umount(8) run by one long-lived shell of ours instead of a process forked from Node per call (issue
 * 39). A fork copies the page tables of the process that forks: the supervisor's (a few hundred MiB) cost about 4
 * ms of its event loop per fork, two forks per pair (the bind and its release), 17 % of its CPU over a batch
 * (docs/benchmarks.md). The shell is small: its forks cost next to nothing, and its children run beside the loop.
 *
 * One request a line, `ID PROGRAM ARG…`, answered `ID STATUS [MESSAGE]` in order; the shell splits the line on
 * blanks with globbing off, so every word must be plain (TOOL_WORD): a request with any other word, and any request
 * while the shell cannot be had, runs the old way (`fallback`). The shell gets a fixed environment (no BASH_ENV, no
 * PATH of the caller's: the programs are absolute), ends when its input closes (this process exited, however), and
 * never keeps this process alive: only a pending request's timer does.
 */

/** A word the shell passes as it is: no blank, quote, glob, `$`, `\` or control character. */
const TOOL_WORD = /^[A-Za-z0-9_./,=:@%+-]+$/;

const SCRIPT = [
  'set -f',
  'while IFS= read -r line; do',
  '  set -- $line',
  '  id=$1; shift',
  '  err=$("$@" 2>&1 >/dev/null </dev/null)',
  '  rc=$?',
  '  if [ "$rc" -eq 0 ]; then echo "$id 0"; else printf \'%s %s %s\\n\' "$id" "$rc" "$(printf \'%s\' "$err" | tr \'\\n\' \' \')"; fi',
  'done',
].join('\n');

const SHELL_ENV = { LC_ALL: 'C', PATH: '/usr/sbin:/usr/bin:/sbin:/bin' };

export type ToolRun = (file: string, args: readonly string[]) => Promise<void>;

interface Pending {
  readonly file: string;
  readonly args: readonly string[];
  readonly command: string;
  readonly resolve: () => void;
  readonly reject: (err: Error) => void;
  readonly timer: NodeJS.Timeout;
}

type Shell = ChildProcessByStdio<Writable, Readable, null>;

/** One shell and what it was asked and has not answered yet. */
interface Live {
  readonly shell: Shell;
  readonly pending: Map<number, Pending>;
  buffered: string;
}

export class ToolShell {
  readonly #fallback: ToolRun;
  readonly #timeoutMs: number;
  readonly #shellPath: string;
  #live: Live | null = null;
  #seq = 0;
  /** The shell could not be started (no /bin/sh, say): every request runs the old way from then on. */
  #unavailable = false;

  constructor(options: { fallback: ToolRun; timeoutMs?: number; shellPath?: string }) {
    this.#fallback = options.fallback;
    this.#timeoutMs = options.timeoutMs ?? 10_000;
    this.#shellPath = options.shellPath ?? '/bin/sh';
  }

  /** Runs `file args…` (an absolute program); resolves on exit status 0, rejects with its stderr otherwise. */
  run(file: string, args: readonly string[]): Promise<void> {
    if (!file.startsWith('/') || ![file, ...args].every((word) => TOOL_WORD.test(word)))
      return this.#fallback(file, args);
    const live = this.#liveOrNull();
    if (live === null) return this.#fallback(file, args);
    const id = ++this.#seq;
    const command = [file, ...args].join(' ');
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#end(live, new Error(`timed out after ${this.#timeoutMs} ms`));
      }, this.#timeoutMs);
      live.pending.set(id, { file, args, command, resolve, reject, timer });
      live.shell.stdin.write(`${id} ${command}\n`);
    });
  }

  /** Ends the shell now (tests; a process that wants it gone before its exit). */
  close(): void {
    if (this.#live !== null) this.#end(this.#live, new Error('tool shell closed'));
  }

  /** The shell's pid, or null when none runs (tests). */
  get pid(): number | null {
    return this.#live?.shell.pid ?? null;
  }

  #liveOrNull(): Live | null {
    if (this.#live !== null) return this.#live;
    if (this.#unavailable) return null;
    let shell: Shell;
    try {
      shell = spawn(this.#shellPath, ['-c', SCRIPT], {
        stdio: ['pipe', 'pipe', 'ignore'],
        env: SHELL_ENV,
        // Its own process group: a timed-out request ends the shell and whatever it runs, together.
        detached: true,
      });
    } catch {
      return null;
    }
    const live: Live = { shell, pending: new Map(), buffered: '' };
    shell.on('error', (err: NodeJS.ErrnoException) => {
      // Not started at all: what it was asked goes the old way, as does everything after.
      if (err.syscall?.startsWith('spawn') === true) this.#unstartable(live);
      else this.#end(live, err);
    });
    shell.on('exit', (code, signal) => this.#end(live, new Error(`tool shell ended (${signal ?? code})`)));
    shell.stdin.on('error', (err) => this.#end(live, err));
    shell.stdout.setEncoding('utf8');
    shell.stdout.on('data', (chunk: string) => this.#answer(live, chunk));
    // Never what keeps this process alive: a pending request's timer does that.
    shell.unref();
    unrefStream(shell.stdin);
    unrefStream(shell.stdout);
    this.#live = live;
    return live;
  }

  #answer(live: Live, chunk: string): void {
    live.buffered += chunk;
    let newline = live.buffered.indexOf('\n');
    while (newline !== -1) {
      const line = live.buffered.slice(0, newline);
      live.buffered = live.buffered.slice(newline + 1);
      newline = live.buffered.indexOf('\n');
      const match = /^(\d+) (\d+) ?(.*)$/.exec(line);
      const pending = match === null ? undefined : live.pending.get(Number(match[1]));
      if (match === null || pending === undefined) continue;
      live.pending.delete(Number(match[1]));
      clearTimeout(pending.timer);
      if (match[2] === '0') pending.resolve();
      else pending.reject(new Error(`${pending.command}: ${match[3]?.trim() || `exit status ${match[2]}`}`));
    }
  }

  #unstartable(live: Live): void {
    this.#unavailable = true;
    if (this.#live === live) this.#live = null;
    const waiting = [...live.pending.values()];
    live.pending.clear();
    for (const pending of waiting) {
      clearTimeout(pending.timer);
      this.#fallback(pending.file, pending.args).then(pending.resolve, pending.reject);
    }
  }

  /** The shell is gone or given up: what it was still asked fails, and the next request starts a new shell. */
  #end(live: Live, err: Error): void {
    if (this.#live === live) this.#live = null;
    try {
      if (live.shell.pid !== undefined && live.shell.exitCode === null && live.shell.signalCode === null)
        process.kill(-live.shell.pid, 'SIGKILL');
    } catch {
      // gone already
    }
    live.shell.stdin.destroy();
    live.shell.stdout.destroy();
    const waiting = [...live.pending.values()];
    live.pending.clear();
    for (const pending of waiting) {
      clearTimeout(pending.timer);
      pending.reject(new Error(`${pending.command}: ${err.message}`, { cause: err }));
    }
  }
}

function unrefStream(stream: Readable | Writable): void {
  (stream as unknown as { unref?: () => void }).unref?.();
}
