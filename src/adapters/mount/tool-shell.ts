import type { ChildProcessByStdio } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import type { Readable, Writable } from 'node:stream';
import { spawnToolShell, takePrespawnedToolShell, unrefStream } from './tool-shell-spawn.js';

/**
 * mount(8) and umount(8) run by one long-lived shell of ours instead of a process forked from Node per call (issue
 * 39). A fork copies the page tables of the process that forks: the supervisor's (a few hundred MiB) cost about 4
 * ms of its event loop per fork, two forks per pair (the bind and its release), 17 % of its CPU over a batch
 * (docs/benchmarks.md). The shell is small: its forks cost next to nothing, and its children run beside the loop.
 *
 * One request a line, `ID r PROGRAM ARG…`, answered `ID STATUS [MESSAGE]` in order; the shell splits the line on
 * blanks with globbing off, so every word must be plain (TOOL_WORD): a request with any other word, and any request
 * while the shell cannot be had, runs the old way (`fallback`). The shell gets a fixed environment (no BASH_ENV, no
 * PATH of the caller's: the programs are absolute), ends when its input closes (this process exited, however), and
 * never keeps this process alive: only a pending request's timer does.
 *
 * Only one request is in the shell at a time (the next is written when it is answered), so its time runs from its
 * own start, and whatever waits behind it has not started: a request past its time, or a shell that ends under one,
 * fails that one alone (the shell and what it runs are killed), and those behind it go to a new shell.
 *
 * A request whose output is wanted (`capture`: the pairs network's `iptables -S`, issue 39) is `ID NONCE PROGRAM
 * ARG…`: the program's standard output goes to ours as it is, followed by a line `NONCE ID STATUS [MESSAGE]` (after a
 * newline of the shell's, so that it starts a line). NONCE is 128 random bits of this process's, new for each request:
 * no output can end a request early without knowing it.
 */

/** A word the shell passes as it is: no blank, quote, glob, `$`, backslash or control character. */
const TOOL_WORD = /^[A-Za-z0-9_./,=:@%+-]+$/;

export type ToolRun = (file: string, args: readonly string[]) => Promise<void>;

/** What a captured program said: its exit status, its standard output as written, its messages on one line. */
export interface ToolOutput {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** The old way for a capture: a process of its own (execFile), given the request's time. */
export type ToolCapture = (file: string, args: readonly string[], timeoutMs: number) => Promise<ToolOutput>;

/** A captured program's output past this is not read: its request fails, and the shell with what it runs ends. */
export const MAX_CAPTURE_CHARS = 16 * 1024 * 1024;

interface Request {
  readonly id: number;
  readonly file: string;
  readonly args: readonly string[];
  readonly command: string;
  /** `r` for a run; a capture's nonce (hex) otherwise. */
  readonly mode: string;
  readonly timeoutMs: number;
  /** What the request asked, the old way (the shell cannot be had, or it was not tried). */
  readonly fallback: () => Promise<ToolOutput | undefined>;
  readonly resolve: (output: ToolOutput | undefined) => void;
  readonly reject: (err: Error) => void;
}

type Shell = ChildProcessByStdio<Writable, Readable, null>;

/** One shell and what it was asked and has not answered yet, in the order asked (the order it answers). */
interface Live {
  readonly shell: Shell;
  readonly queue: Request[];
  buffered: string;
  /** A capture's output read so far and set aside (not searched again), and its length. */
  output: string[];
  outputChars: number;
  /** The time of the request at the head of the queue (the one written, running). */
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
    const fallback = (): Promise<undefined> => this.#fallback(file, args).then(() => undefined);
    return this.#ask(file, args, 'r', this.#timeoutMs, fallback).then(() => undefined);
  }

  /**
   * Runs `file args…` (an absolute program) for its output: resolves with its exit status (any), its standard output
   * and its messages (on one line), or rejects when it could not be run or answer within `timeoutMs` (the shell and
   * what it runs are then killed). `fallback` runs it the old way when the shell is not to be used. Never throws.
   */
  capture(
    file: string,
    args: readonly string[],
    timeoutMs: number,
    fallback: ToolCapture,
  ): Promise<ToolOutput> {
    const nonce = randomBytes(16).toString('hex');
    const old = (): Promise<ToolOutput> => fallback(file, args, timeoutMs);
    return this.#ask(file, args, nonce, timeoutMs, old).then((output) => output ?? old());
  }

  #ask(
    file: string,
    args: readonly string[],
    mode: string,
    timeoutMs: number,
    fallback: () => Promise<ToolOutput | undefined>,
  ): Promise<ToolOutput | undefined> {
    try {
      if (!file.startsWith('/') || ![file, ...args].every((word) => TOOL_WORD.test(word))) return fallback();
      return new Promise<ToolOutput | undefined>((resolve, reject) => {
        const command = [file, ...args].join(' ');
        this.#enqueue({ id: ++this.#seq, file, args, command, mode, timeoutMs, fallback, resolve, reject });
      });
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  /** To the live shell's queue (written now if it is the only one), or the old way when no shell can be had. */
  #enqueue(request: Request): void {
    const live = this.#liveOrNull();
    if (live === null) {
      request.fallback().then(request.resolve, request.reject);
      return;
    }
    live.queue.push(request);
    if (live.queue.length === 1) this.#sendHead(live);
  }

  /** Ends the shell now, failing what it was asked (tests; a process that wants it gone before its exit). */
  close(): void {
    const live = this.#live;
    if (live === null) return;
    this.#kill(live);
    for (const request of live.queue.splice(0))
      request.reject(new Error(`${request.command}: tool shell closed`));
  }

  /** The shell's pid, or null when none runs (tests). */
  get pid(): number | null {
    return this.#live?.shell.pid ?? null;
  }

  /**
   * Only the head of the queue is ever written to the shell: whatever is behind it has not started, so it can go to
   * another shell when this one fails. The head's time starts now.
   */
  #sendHead(live: Live): void {
    const head = live.queue[0];
    if (head === undefined) return;
    live.timer = setTimeout(() => {
      // Its answer may be waiting in the pipe behind a stalled loop: read what came before judging it late.
      setImmediate(() => {
        if (this.#live === live && live.queue[0] === head)
          this.#fail(live, new Error(`${head.command}: timed out after ${head.timeoutMs} ms`));
      });
    }, head.timeoutMs);
    live.shell.stdin.write(`${head.id} ${head.mode} ${head.command}\n`);
  }

  /**
   * The shell failed its running request (`err`, or its own end): that one fails, the shell and whatever it runs
   * end, and the requests behind it, never written, go to a new shell.
   */
  #fail(live: Live, err: Error): void {
    const [head, ...behind] = live.queue.splice(0);
    this.#kill(live);
    head?.reject(err);
    for (const request of behind) this.#enqueue(request);
  }

  #liveOrNull(): Live | null {
    if (this.#live !== null) return this.#live;
    if (this.#unavailable) return null;
    // The one bin/run.js started for a `pair run` while the process was small, else a new one.
    const shell = takePrespawnedToolShell(this.#shellPath) ?? spawnToolShell(this.#shellPath);
    // Out of descriptors or processes (EMFILE, EAGAIN), spawn hands back a child without its pipes: this request
    // goes the old way; a later one tries the shell again.
    if (shell.stdin == null || shell.stdout == null) {
      shell.on('error', () => undefined);
      return null;
    }
    const live: Live = { shell, queue: [], buffered: '', output: [], outputChars: 0, timer: null };
    shell.on('error', (err: NodeJS.ErrnoException) => {
      // Not started at all: what it was asked goes the old way; a shell that can never start is not tried again.
      if (err.syscall?.startsWith('spawn') === true)
        this.#unstartable(live, NEVER_STARTS.has(err.code ?? ''));
      else if (this.#live === live) this.#fail(live, err);
    });
    // 'close', not 'exit': its output is read to the end first, so an answer it gave before ending counts.
    shell.on('close', (code, signal) => {
      if (this.#live === live) this.#fail(live, new Error(`tool shell ended (${signal ?? code})`));
    });
    shell.stdin.on('error', (err) => {
      if (this.#live === live) this.#fail(live, err);
    });
    shell.stdout.setEncoding('utf8');
    shell.stdout.on('data', (chunk: string) => this.#answer(live, chunk));
    // Never what keeps this process alive: a pending request's timer does that.
    shell.unref();
    unrefStream(shell.stdin);
    unrefStream(shell.stdout);
    this.#live = live;
    return live;
  }

  /** The answer of the head (the one request written); anything else is a shell out of step, given up. */
  #answer(live: Live, chunk: string): void {
    if (this.#live !== live) return;
    live.buffered += chunk;
    while (this.#live === live && live.buffered !== '') {
      const head = live.queue[0];
      const answered =
        head === undefined
          ? null
          : head.mode === 'r'
            ? this.#ranLine(live, head)
            : this.#captured(live, head);
      if (answered === 'wait') return;
      if (head === undefined || answered === null) {
        const said = JSON.stringify(live.buffered.slice(0, 200));
        this.#fail(live, new Error(`${head?.command ?? 'tool shell'}: the tool shell answered ${said}`));
        return;
      }
      live.queue.shift();
      if (live.timer !== null) clearTimeout(live.timer);
      live.timer = null;
      if (answered instanceof Error) head.reject(answered);
      else head.resolve(answered);
      this.#sendHead(live);
    }
  }

  /** A run's answer line (`ID STATUS [MESSAGE]`), taken from the buffer; `wait` for the rest of it, null if wrong. */
  #ranLine(live: Live, head: Request): ToolOutput | undefined | Error | 'wait' | null {
    const newline = live.buffered.indexOf('\n');
    if (newline === -1) return 'wait';
    const line = live.buffered.slice(0, newline);
    const match = /^(\d+) (\d+) ?([^]*)$/.exec(line);
    if (match === null || Number(match[1]) !== head.id) return null;
    live.buffered = live.buffered.slice(newline + 1);
    return match[2] === '0'
      ? undefined
      : new Error(`${head.command}: ${match[3]?.trim() || `exit status ${match[2]}`}`);
  }

  /**
   * A capture's output and its closing line (`\nNONCE ID STATUS [MESSAGE]\n`), taken from the buffer when whole. Output
   * with no closing line in it is set aside but for its last characters (the start of the line, maybe), so each byte
   * is searched about once, however long the output.
   */
  #captured(live: Live, head: Request): ToolOutput | 'wait' | null {
    const marker = `\n${head.mode} ${head.id} `;
    const at = live.buffered.indexOf(marker);
    const end = at === -1 ? -1 : live.buffered.indexOf('\n', at + marker.length);
    if (end === -1) {
      this.#setAside(live, at === -1 ? live.buffered.length - (marker.length - 1) : at);
      // Its program still writes (or its message does not end): the shell and what it runs end with the request.
      if (live.outputChars + live.buffered.length > MAX_CAPTURE_CHARS)
        this.#fail(live, new Error(`${head.command}: more than ${MAX_CAPTURE_CHARS} characters of output`));
      return 'wait';
    }
    const match = /^(\d+) ?([^]*)$/.exec(live.buffered.slice(at + marker.length, end));
    if (match === null) return null;
    const stdout = live.output.join('') + live.buffered.slice(0, at);
    live.output = [];
    live.outputChars = 0;
    live.buffered = live.buffered.slice(end + 1);
    return { code: Number(match[1]), stdout, stderr: match[2]?.trim() ?? '' };
  }

  /** The first `chars` characters of the buffer, a capture's output, set aside. */
  #setAside(live: Live, chars: number): void {
    if (chars <= 0) return;
    live.output.push(live.buffered.slice(0, chars));
    live.outputChars += chars;
    live.buffered = live.buffered.slice(chars);
  }

  #unstartable(live: Live, forGood: boolean): void {
    if (forGood) this.#unavailable = true;
    if (this.#live === live) this.#live = null;
    if (live.timer !== null) clearTimeout(live.timer);
    for (const request of live.queue.splice(0)) request.fallback().then(request.resolve, request.reject);
  }

  /** This shell is done: no longer the live one, its clock stopped, it and whatever it runs killed. */
  #kill(live: Live): void {
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
  }
}
