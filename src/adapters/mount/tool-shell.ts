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
 *
 * The shell runs one request at a time, so a request's time runs from when the one before it is answered (not from
 * when it was queued): a request past its time ends the shell and fails alone; those queued behind it never started
 * and go to a new shell.
 */

/** A word the shell passes as it is: no blank, quote, glob, `$`, backslash or control character. */
const TOOL_WORD = /^[A-Za-z0-9_./,=:@%+-]+$/;

const SCRIPT = [
  'set -f',
  'while IFS= read -r line; do',
  '  set -- $line',
  '  id=$1; shift',
  '  err=$("$@" 2>&1 >/dev/null </dev/null)',
  '  rc=$?',
  '  if [ "$rc" -eq 0 ]; then echo "$id 0"; else printf \'%s %s %s\\n\' "$id" "$rc" "$(printf \'%s\' "$err" | tr \'\\r\\n\' \'  \')"; fi',
  'done',
].join('\n');

/** The tools' whole environment, in the shell and without it: C messages, the system folders, nothing of the caller's. */
export const TOOL_ENV: Readonly<Record<string, string>> = {
  LC_ALL: 'C',
  PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
};

export type ToolRun = (file: string, args: readonly string[]) => Promise<void>;

interface Request {
  readonly id: number;
  readonly file: string;
  readonly args: readonly string[];
  readonly command: string;
  readonly resolve: () => void;
  readonly reject: (err: Error) => void;
}

type Shell = ChildProcessByStdio<Writable, Readable, null>;

/** One shell and what it was asked and has not answered yet, in the order asked (the order it answers). */
interface Live {
  readonly shell: Shell;
  readonly queue: Request[];
  buffered: string;
  /** The time of the request at the head of the queue (the one running). */
  timer: NodeJS.Timeout | null;
}

/** spawn errors that say the shell cannot be had here at all (not a passing shortage of descriptors or processes). */
const NEVER_STARTS = new Set(['ENOENT', 'EACCES', 'ENOEXEC']);

export class ToolShell {
  readonly #fallback: ToolRun;
  readonly #timeoutMs: number;
  readonly #shellPath: string;
  #live: Live | null = null;
  #seq = 0;
  /** The shell cannot be started here (no /bin/sh, say): every request runs the old way from then on. */
  #unavailable = false;

  constructor(options: { fallback: ToolRun; timeoutMs?: number; shellPath?: string }) {
    this.#fallback = options.fallback;
    this.#timeoutMs = options.timeoutMs ?? 10_000;
    this.#shellPath = options.shellPath ?? '/bin/sh';
  }

  /**
   * Runs `file args…` (an absolute program); resolves on exit status 0, rejects with its stderr otherwise. Never
   * throws: every failure is the promise's.
   */
  run(file: string, args: readonly string[]): Promise<void> {
    try {
      if (!file.startsWith('/') || ![file, ...args].every((word) => TOOL_WORD.test(word)))
        return this.#fallback(file, args);
      const live = this.#liveOrNull();
      if (live === null) return this.#fallback(file, args);
      return new Promise<void>((resolve, reject) => {
        this.#send(live, {
          id: ++this.#seq,
          file,
          args,
          command: [file, ...args].join(' '),
          resolve,
          reject,
        });
      });
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  /** Ends the shell now (tests; a process that wants it gone before its exit). */
  close(): void {
    if (this.#live !== null) this.#end(this.#live, new Error('tool shell closed'));
  }

  /** The shell's pid, or null when none runs (tests). */
  get pid(): number | null {
    return this.#live?.shell.pid ?? null;
  }

  #send(live: Live, request: Request): void {
    live.queue.push(request);
    if (live.queue.length === 1) this.#startClock(live);
    live.shell.stdin.write(`${request.id} ${request.command}\n`);
  }

  /** The head of the queue runs now: its time starts. */
  #startClock(live: Live): void {
    if (live.timer !== null) clearTimeout(live.timer);
    live.timer = live.queue.length === 0 ? null : setTimeout(() => this.#timedOut(live), this.#timeoutMs);
  }

  /** The running request took too long: it fails, the shell (and what it runs) ends, the rest go to a new shell. */
  #timedOut(live: Live): void {
    const [head, ...behind] = live.queue;
    live.queue.length = 0;
    this.#end(live, new Error('tool shell ended'));
    head?.reject(new Error(`${head.command}: timed out after ${this.#timeoutMs} ms`));
    for (const request of behind) this.run(request.file, request.args).then(request.resolve, request.reject);
  }

  #liveOrNull(): Live | null {
    if (this.#live !== null) return this.#live;
    if (this.#unavailable) return null;
    const shell = spawn(this.#shellPath, ['-c', SCRIPT], {
      stdio: ['pipe', 'pipe', 'ignore'],
      env: TOOL_ENV,
      // Its own process group: a timed-out request ends the shell and whatever it runs, together.
      detached: true,
    });
    // Out of descriptors or processes (EMFILE, EAGAIN), spawn hands back a child without its pipes: this request
    // goes the old way; a later one tries the shell again.
    if (shell.stdin == null || shell.stdout == null) {
      shell.on('error', () => undefined);
      return null;
    }
    const live: Live = { shell, queue: [], buffered: '', timer: null };
    shell.on('error', (err: NodeJS.ErrnoException) => {
      // Not started at all: what it was asked goes the old way; a shell that can never start is not tried again.
      if (err.syscall?.startsWith('spawn') === true)
        this.#unstartable(live, NEVER_STARTS.has(err.code ?? ''));
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

  /** Answers come in the order asked: each line is the head's (a line that is not its answer fails the head). */
  #answer(live: Live, chunk: string): void {
    live.buffered += chunk;
    let newline = live.buffered.indexOf('\n');
    while (newline !== -1) {
      const line = live.buffered.slice(0, newline);
      live.buffered = live.buffered.slice(newline + 1);
      newline = live.buffered.indexOf('\n');
      const head = live.queue.shift();
      if (head === undefined) continue;
      this.#startClock(live);
      const match = /^(\d+) (\d+) ?([^]*)$/.exec(line);
      if (match === null || Number(match[1]) !== head.id)
        head.reject(
          new Error(`${head.command}: the tool shell answered ${JSON.stringify(line.slice(0, 200))}`),
        );
      else if (match[2] === '0') head.resolve();
      else head.reject(new Error(`${head.command}: ${match[3]?.trim() || `exit status ${match[2]}`}`));
    }
  }

  #unstartable(live: Live, forGood: boolean): void {
    if (forGood) this.#unavailable = true;
    if (this.#live === live) this.#live = null;
    if (live.timer !== null) clearTimeout(live.timer);
    const waiting = live.queue.splice(0);
    for (const request of waiting)
      this.#fallback(request.file, request.args).then(request.resolve, request.reject);
  }

  /** The shell is gone or given up: what it was still asked fails, and the next request starts a new shell. */
  #end(live: Live, err: Error): void {
    if (this.#live === live) this.#live = null;
    if (live.timer !== null) clearTimeout(live.timer);
    live.timer = null;
    try {
      if (live.shell.pid !== undefined && live.shell.exitCode === null && live.shell.signalCode === null)
        process.kill(-live.shell.pid, 'SIGKILL');
    } catch {
      // gone already
    }
    live.shell.stdin.destroy();
    live.shell.stdout.destroy();
    const waiting = live.queue.splice(0);
    for (const request of waiting)
      request.reject(new Error(`${request.command}: ${err.message}`, { cause: err }));
  }
}

function unrefStream(stream: Readable | Writable): void {
  (stream as unknown as { unref?: () => void }).unref?.();
}
