import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { systemTool } from '../system-tool.js';

/**
 * Tells whether the firewall may have changed since a moment of the caller's choosing, without a process spawned
 * per question (issue 39): the guard lists the rules (`iptables -S`) only when it may have.
 *
 * `mark()` before a listing, `unchangedSince(mark)` at the next create: true only when the watch has run unbroken
 * since the mark, has seen no change of the ruleset, and nothing the kernel has sent it is still unread.
 */
export interface RulesetWatch {
  /** A token for "now", or null when the watch cannot vouch for anything (not running, not subscribed yet). */
  mark(): Promise<number | null>;
  /** True when nothing in the ruleset changed since `mark` was taken (and the watch can prove it). */
  unchangedSince(mark: number): Promise<boolean>;
  /** Ends the watch's process (tests; the process's own exit ends it too). */
  close(): void;
}

/** NFNLGRP_NFTABLES (7): the netlink group nf_tables reports every committed ruleset change on. */
const NFTABLES_GROUP_BIT = 1 << 6;
const NETLINK_NETFILTER = 12;
/** How long the monitor may take to subscribe before the watch gives up for this process (falls back to listing). */
const READY_DEADLINE_MS = 3_000;
/** How long a question waits for the monitor to pass on what it is reading before the answer is "may have changed". */
const SETTLE_DEADLINE_MS = 50;

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * The kernel's own change feed, read through `xtables-monitor -e` (one long-lived process per guard, in the engine's
 * network namespace through `prefix`, killed with us: `setpriv --pdeathsig KILL`). nf_tables sends every committed
 * change (any table, any family, by iptables-nft, nft or anything else) to the subscribers of its netlink group
 * before the command that made it returns; the monitor prints a line for each. Any byte from it, its exit, or a
 * drop on its socket is "changed". The answer "unchanged" also needs the feed to be caught up, checked through
 * /proc: the monitor's netlink socket has nothing queued (Rmem 0, Drops 0), the monitor is asleep (not between a
 * read and its write), and a poll of our event loop begun after that has read its pipe.
 *
 * Only meaningful with the nf_tables backend (`iptables -V` says `nf_tables`): the legacy backend has no change
 * feed, and then `mark` is always null (every create lists, as before).
 */
export class NetfilterWatch implements RulesetWatch {
  readonly #prefix: readonly string[];
  readonly #backend: () => Promise<boolean>;
  #child: ChildProcess | null = null;
  #socketInode: string | null = null;
  #ready: Promise<boolean> | null = null;
  /** Bumped on every sign of change; a mark is the epoch it was taken at. */
  #epoch = 0;
  #disabled = false;

  /** `nfTablesBackend`: whether iptables here is the nf_tables backend (asked once, on the first mark). */
  constructor(prefix: readonly string[], nfTablesBackend: () => Promise<boolean>) {
    this.#prefix = prefix;
    this.#backend = nfTablesBackend;
  }

  async mark(): Promise<number | null> {
    if (!(await this.#start())) return null;
    if (!(await this.#caughtUp())) return null;
    return this.#epoch;
  }

  async unchangedSince(mark: number): Promise<boolean> {
    if (this.#child === null || mark !== this.#epoch) return false;
    return (await this.#caughtUp()) && mark === this.#epoch;
  }

  close(): void {
    this.#disabled = true;
    this.#stop();
  }

  #stop(): void {
    this.#epoch += 1;
    const child = this.#child;
    this.#child = null;
    this.#socketInode = null;
    this.#ready = null;
    if (child !== null && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }

  /** The monitor running and subscribed; false when it cannot be (the caller then lists every time). */
  #start(): Promise<boolean> {
    if (this.#disabled) return Promise.resolve(false);
    this.#ready ??= this.#launch().then((ok) => {
      if (!ok) {
        // Not available here (legacy backend, no xtables-monitor, no setpriv): asked no more in this process.
        this.#disabled = true;
        this.#stop();
      }
      return ok;
    });
    return this.#ready;
  }

  async #launch(): Promise<boolean> {
    if (!(await this.#backend().catch(() => false))) return false;
    const [prefixTool, ...prefixArgs] = this.#prefix;
    const argv = [
      ...(prefixTool !== undefined ? [systemTool(prefixTool), ...prefixArgs] : []),
      systemTool('setpriv'),
      '--pdeathsig',
      'KILL',
      systemTool('stdbuf'),
      '-oL',
      systemTool('xtables-monitor'),
      '-e',
    ];
    const [file = '', ...args] = argv;
    let child: ChildProcess;
    try {
      child = spawn(file, args, { stdio: ['ignore', 'pipe', 'ignore'] });
    } catch {
      return false;
    }
    this.#child = child;
    const changed = () => {
      this.#epoch += 1;
    };
    child.stdout?.on('data', changed);
    child.on('error', () => {
      if (this.#child === child) this.#stop();
    });
    child.on('exit', () => {
      if (this.#child === child) this.#stop();
    });
    // Never keeps the CLI alive: a process that is done exits, and the monitor with it (pdeathsig).
    child.unref();
    (child.stdout as { unref?: () => void } | null)?.unref?.();
    const deadline = Date.now() + READY_DEADLINE_MS;
    while (Date.now() < deadline) {
      if (this.#child !== child) return false;
      const inode = subscribedSocket(child.pid);
      if (inode !== null) {
        this.#socketInode = inode;
        // Whatever changed before the subscription is covered by the caller's listing after its mark.
        this.#epoch += 1;
        return true;
      }
      await pause(10);
    }
    return false;
  }

  /** The feed has passed on everything the kernel sent it so far (see the class comment). */
  async #caughtUp(): Promise<boolean> {
    const child = this.#child;
    const inode = this.#socketInode;
    if (child?.pid === undefined || inode === null) return false;
    const deadline = Date.now() + SETTLE_DEADLINE_MS;
    for (;;) {
      const socket = netlinkSocket(child.pid, inode);
      if (socket === null || socket.drops > 0) {
        this.#stop();
        return false;
      }
      if (socket.rmem === 0 && processState(child.pid) === 'S') break;
      if (Date.now() > deadline) return false;
      await pause(1);
    }
    // The monitor wrote what it read before it went to sleep, so the pipe is readable now; a poll of our loop that
    // begins after this point reads it. One immediate is not enough: asked from the poll phase (an I/O callback, the
    // usual caller), it runs in the same iteration's check phase, before any new poll, and the write the monitor made
    // after that iteration's poll began would be read only after the answer (seen in CI: 1 change in 60 missed, and
    // 3 in 1,800 under a busy machine). The second immediate runs in the next iteration, after its poll.
    await nextTurn();
    await nextTurn();
    return this.#child === child;
  }
}

/** The inode of `pid`'s netfilter netlink socket subscribed to nf_tables' group, or null. */
function subscribedSocket(pid: number | undefined): string | null {
  if (pid === undefined) return null;
  try {
    const inodes = new Set<string>();
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      const m = /^socket:\[(\d+)\]$/.exec(safeReadlink(`/proc/${pid}/fd/${fd}`));
      if (m?.[1] !== undefined) inodes.add(m[1]);
    }
    for (const row of netlinkRows(pid))
      if (inodes.has(row.inode) && row.eth === NETLINK_NETFILTER && (row.groups & NFTABLES_GROUP_BIT) !== 0)
        return row.inode;
  } catch {
    return null;
  }
  return null;
}

function netlinkSocket(pid: number, inode: string): { rmem: number; drops: number } | null {
  try {
    const row = netlinkRows(pid).find((r) => r.inode === inode);
    return row === undefined ? null : { rmem: row.rmem, drops: row.drops };
  } catch {
    return null;
  }
}

/** /proc/PID/net/netlink: `sk Eth Pid Groups Rmem Wmem Dump Locks Drops Inode`, of PID's network namespace. */
function netlinkRows(
  pid: number,
): { eth: number; groups: number; rmem: number; drops: number; inode: string }[] {
  return readFileSync(`/proc/${pid}/net/netlink`, 'utf8')
    .split('\n')
    .slice(1)
    .map((line) => line.trim().split(/\s+/))
    .filter((f) => f.length >= 10)
    .map((f) => ({
      eth: Number(f[1]),
      groups: Number.parseInt(f[3] ?? '0', 16),
      rmem: Number(f[4]),
      drops: Number(f[8]),
      inode: f[9] ?? '',
    }));
}

/** The state letter of /proc/PID/stat (R running, S sleeping, …), or null when it is gone. */
function processState(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  } catch {
    return null;
  }
}

function safeReadlink(path: string): string {
  try {
    return readlinkSync(path);
  } catch {
    return '';
  }
}
