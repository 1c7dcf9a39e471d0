import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { open } from 'node:fs/promises';
import net from 'node:net';
import { dirname } from 'node:path';
import type { EgressGate, EgressLease } from '../../app/ports/egress.js';
import { proxyEnvironment } from '../../core/egress/egress-network.js';
import type { EgressInput } from '../../core/egress/policy.js';
import type { EgressRecord, EmittedRecord } from '../../core/egress/record.js';
import { RoboguideError } from '../../core/errors.js';
import type { DockerEgressNetwork } from './docker-egress-network.js';
import { readLines } from './control-lines.js';
import { makeDirs } from '../fs/make-dirs.js';

/** Records kept per lease; past it they are counted (`dropped`). */
const MAX_RECORDS = 20_000;
const START_DEADLINE_MS = 15_000;
const REPLY_TIMEOUT_MS = 10_000;
const CLOSE_SETTLE_MS = 300;
/** How long the engine is given to say a container's address (the records wait for it, in order). */
const ADDRESS_TIMEOUT_MS = 5_000;
/** How soon a container whose address is not known may be asked again (for a packet that matched no lease). */
const ASK_AGAIN_MS = 1_000;
/** How long after a failed restart of the proxy the client tries again. */
const RETRY_MS = 1_000;

export interface EgressBrokerOptions {
  readonly network: DockerEgressNetwork;
  /** The proxy's control socket (a Unix socket: it works across network namespaces). */
  readonly controlPath: string;
  /** How the proxy process is started: `[node, …/proxy-main.js]`, after a prefix where the engine has its own namespace. */
  readonly command: readonly string[];
  /** The proxy's resolvers (absent: the host's). */
  readonly dns?: readonly string[];
  /** The proxy process's own log (its stdout and stderr). */
  readonly logPath: string;
  /**
   * A container's IPv4 and link-layer addresses on the egress network while it is on it (the packets that bypassed the
   * proxy carry them), else null.
   */
  readonly linkOf: (containerId: string) => Promise<{ address: string | null; mac: string | null } | null>;
  /** How long a lease's close waits for the last tunnels' records (default 300 ms). */
  readonly closeSettleMs?: number;
}

interface Lease {
  token: string;
  policy: EgressInput;
  containerId: string | null;
  /** The link-layer address made for this lease: its container is created with it (`EgressLease.mac`). */
  readonly ownMac: string;
  /**
   * Its container's link-layer address as far as known, and how: `own` (created with `ownMac`: no other container has
   * had it, nor will), `learned` (from the engine: a reattached container, or one moved onto the network, whose address
   * the engine made from its IPv4 one), `unknown` (not yet learned: only then may a packet be matched by IPv4 address
   * alone).
   */
  mac: string;
  macState: 'own' | 'learned' | 'unknown';
  /** The starts (and moves onto the network) of its container seen through. */
  runs: number;
  /** When the engine was last asked its addresses (a question a packet that matches nothing asks again, not sooner). */
  askedAt: number;
  /** Its container's address on the egress network, asked once it runs and kept for the lease's life. */
  address: string | null;
  /** The question of that address while it is asked. */
  learning: Promise<void> | null;
  /**
   * When its container was about to get that address (its start asked; 0: running before this lease knew it). The
   * engine gives a freed address to the next container at once: a packet from before this moment was another's.
   */
  since: number;
  /** The moment of a start asked and not yet seen through (`starting`). */
  starting: number | null;
  records: EgressRecord[];
  dropped: number;
  /** Where records go as they arrive (none kept here), when the caller gave it. */
  onRecord: ((record: EgressRecord) => void) | undefined;
}

/**
 * The client side of the egress proxy: starts it when no proxy answers on the control socket, registers each lease
 * and keeps the records of its own leases (by token, or by the container's address for the packets the sink took).
 * When the proxy goes away, every lease is refused everything until the proxy is back and the leases registered
 * again (done here, on the next call and when the control connection closes): fail closed.
 */
export class EgressBroker implements EgressGate {
  readonly #options: EgressBrokerOptions;
  readonly #leases = new Map<string, Lease>();
  #socket: net.Socket | null = null;
  #connecting: Promise<net.Socket> | null = null;
  #nextId = 1;
  /** The questions awaiting the proxy's answer, each with the connection it was asked on. */
  readonly #pending = new Map<
    number,
    { socket: net.Socket; resolve: (reply: { op: string; error?: string }) => void }
  >();
  #gateway: string | null = null;
  #retrying = false;
  /** The records, kept one after the other in the order the proxy sent them (a lease's file keeps that order). */
  #keeping: Promise<void> = Promise.resolve();

  constructor(options: EgressBrokerOptions) {
    this.#options = options;
  }

  async open(
    policy: EgressInput,
    token: string,
    onRecord?: (record: EgressRecord) => void,
  ): Promise<EgressLease> {
    if (token.length < 16 || this.#leases.has(token))
      throw new RoboguideError('E_NETWORK', 'an egress lease needs a fresh token of 16 characters or more');
    const gateway = await this.#options.network.ensure();
    this.#gateway = gateway;
    const mac = localMac();
    const lease: Lease = {
      token,
      policy,
      containerId: null,
      ownMac: mac,
      mac,
      macState: 'unknown',
      runs: 0,
      askedAt: 0,
      address: null,
      learning: null,
      since: 0,
      starting: null,
      records: [],
      dropped: 0,
      onRecord,
    };
    // Known before the proxy answers: the records it kept for this token (a reattached pair's) follow its answer.
    this.#leases.set(lease.token, lease);
    try {
      await this.#request({ op: 'register', token: lease.token, policy });
    } catch (err) {
      this.#leases.delete(lease.token);
      throw err;
    }
    return this.#handle(lease, gateway);
  }

  /** What a lease's holder is given: its container's settings, and the calls of its container's life. */
  #handle(lease: Lease, gateway: string): EgressLease {
    const { proxy } = this.#options.network.ports;
    return {
      env: proxyEnvironment(gateway, proxy, lease.token),
      dns: [gateway],
      token: lease.token,
      mac: lease.ownMac,
      attach: (containerId, created = false) => {
        if (lease.containerId === containerId) return;
        lease.containerId = containerId;
        lease.address = null;
        lease.learning = null;
        lease.mac = lease.ownMac;
        lease.macState = created ? 'own' : 'unknown';
        lease.runs = 0;
        lease.askedAt = 0;
      },
      starting: () => {
        lease.starting = Date.now();
      },
      started: () => {
        // A container that joined the network again (a session's switch) has a new address, and maybe a link-layer
        // address the engine made: both asked again.
        if (lease.runs > 0) lease.macState = 'unknown';
        lease.runs += 1;
        lease.address = null;
        lease.since = lease.starting ?? 0;
        lease.starting = null;
        void this.#learn(lease);
      },
      setPolicy: async (next) => {
        await this.#request({ op: 'register', token: lease.token, policy: next });
        lease.policy = next;
      },
      snapshot: () => ({ records: [...lease.records], dropped: lease.dropped }),
      close: async () => {
        // The last tunnels' records come as their connections close with the container: a moment for them.
        await new Promise((resolve) => setTimeout(resolve, this.#options.closeSettleMs ?? CLOSE_SETTLE_MS));
        // Kept until the proxy answers: it answers once the sink has recorded what it took, and those records (by
        // the container's address) must still find this lease.
        await this.#request({ op: 'release', token: lease.token }).catch(() => undefined);
        // Every record the proxy sent before that answer is queued by now: kept before the lease goes (a moment at most:
        // the queue is every lease's).
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          this.#keeping,
          new Promise((resolve) => (timer = setTimeout(resolve, ADDRESS_TIMEOUT_MS))),
        ]);
        clearTimeout(timer);
        this.#leases.delete(lease.token);
        if (this.#leases.size === 0 && this.#socket !== null) {
          // Ended, and forgotten at once: a lease opened next connects again (a socket ended is written to no more).
          this.#socket.end();
          this.#socket = null;
        }
        return { records: lease.records, dropped: lease.dropped };
      },
    };
  }

  async #request(body: Record<string, unknown>): Promise<void> {
    const socket = await this.#connected();
    const id = this.#nextId++;
    const reply = await new Promise<{ op: string; error?: string }>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(new RoboguideError('E_NETWORK', 'the egress proxy did not answer'));
      }, REPLY_TIMEOUT_MS);
      this.#pending.set(id, {
        socket,
        resolve: (r) => {
          clearTimeout(timer);
          resolve(r);
        },
      });
      socket.write(`${JSON.stringify({ ...body, id })}\n`);
    });
    if (reply.op !== 'ok')
      throw new RoboguideError(
        'E_NETWORK',
        `the egress proxy refused the policy: ${reply.error ?? reply.op}`,
      );
  }

  async #connected(): Promise<net.Socket> {
    if (this.#socket !== null && !this.#socket.destroyed && !this.#socket.writableEnded) return this.#socket;
    this.#connecting ??= this.#connect().finally(() => {
      this.#connecting = null;
    });
    return this.#connecting;
  }

  async #connect(): Promise<net.Socket> {
    let socket = await tryConnect(this.#options.controlPath);
    if (socket === null) {
      await this.#spawn();
      const until = Date.now() + START_DEADLINE_MS;
      while (socket === null && Date.now() < until) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        socket = await tryConnect(this.#options.controlPath);
      }
      if (socket === null)
        throw new RoboguideError(
          'E_NETWORK',
          `the egress proxy did not start within ${START_DEADLINE_MS / 1000} s (its log: ${this.#options.logPath})`,
        );
    }
    this.#socket = socket;
    this.#listen(socket);
    // Leases registered with a proxy that went away: registered again with this one.
    for (const lease of this.#leases.values())
      socket.write(
        `${JSON.stringify({ op: 'register', token: lease.token, policy: lease.policy, id: 0 })}\n`,
      );
    return socket;
  }

  async #spawn(): Promise<void> {
    const gateway = this.#gateway ?? (await this.#options.network.ensure());
    const { proxy, sink } = this.#options.network.ports;
    await makeDirs(dirname(this.#options.controlPath), 0o700);
    const log = await open(this.#options.logPath, 'a', 0o600);
    const [file = '', ...args] = this.#options.command;
    const child = spawn(
      file,
      [
        ...args,
        '--listen',
        gateway,
        '--proxy-port',
        String(proxy),
        '--sink-port',
        String(sink),
        '--control',
        this.#options.controlPath,
        ...(this.#options.dns !== undefined ? ['--dns', this.#options.dns.join(',')] : []),
      ],
      { detached: true, stdio: ['ignore', log.fd, log.fd] },
    );
    child.on('error', () => undefined);
    child.unref();
    await log.close();
  }

  #listen(socket: net.Socket): void {
    readLines(socket, (line) => this.#message(line));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      if (this.#socket === socket) this.#socket = null;
      for (const [id, pending] of this.#pending) {
        if (pending.socket !== socket) continue; // asked on a newer connection
        this.#pending.delete(id);
        pending.resolve({ op: 'error', error: 'the control connection closed' });
      }
      // The proxy went away while leases live: started again and told them (their pairs reach nothing meanwhile).
      this.#reconnect();
    });
  }

  /**
   * Until the proxy answers again, while leases live: a restart that fails (the proxy cannot start yet) is tried
   * again after RETRY_MS, never given up while a pair depends on it (its pair reaches nothing meanwhile).
   */
  #reconnect(): void {
    if (this.#leases.size === 0 || this.#retrying) return;
    this.#retrying = true;
    void (async () => {
      while (this.#leases.size > 0 && (this.#socket === null || this.#socket.destroyed)) {
        try {
          await this.#connected();
        } catch {
          await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
        }
      }
      this.#retrying = false;
    })();
  }

  #message(line: string): void {
    let message: { op?: string; id?: number; error?: string; record?: EmittedRecord };
    try {
      message = JSON.parse(line) as typeof message;
    } catch {
      return;
    }
    if (message.op === 'record' && message.record !== undefined) {
      const record = message.record;
      this.#keeping = this.#keeping.then(() => this.#keep(record)).catch(() => undefined);
      return;
    }
    if (typeof message.id === 'number') {
      const pending = this.#pending.get(message.id);
      this.#pending.delete(message.id);
      pending?.resolve({
        op: message.op ?? 'error',
        ...(message.error !== undefined ? { error: message.error } : {}),
      });
    }
  }

  /**
   * The lease's container asked for its address now (it runs): a packet it sends past the proxy is known by that
   * address even when it comes after the container's exit, when the engine no longer says it.
   */
  #learn(lease: Lease): Promise<void> {
    const containerId = lease.containerId;
    if (containerId === null) return Promise.resolve();
    lease.askedAt = Date.now();
    let timer: NodeJS.Timeout | undefined;
    const learning = Promise.race([
      this.#options.linkOf(containerId).catch(() => null),
      new Promise<null>((resolve) => {
        timer = setTimeout(() => resolve(null), ADDRESS_TIMEOUT_MS);
      }),
    ])
      .finally(() => clearTimeout(timer))
      .then((link) => {
        if (lease.learning !== learning) return; // attached to another container meanwhile
        lease.learning = null;
        if (link?.address) lease.address = link.address;
        const mac = link?.mac ? link.mac.toLowerCase() : null;
        if (mac !== null) {
          lease.mac = mac;
          lease.macState = mac === lease.ownMac ? 'own' : 'learned';
        }
      });
    lease.learning = learning;
    return learning;
  }

  async #keep(emitted: EmittedRecord): Promise<void> {
    const { token, mac, ...record } = emitted;
    const lease =
      token !== undefined
        ? this.#leases.get(token)
        : await this.#leaseAt(record.source, mac, Date.parse(record.time));
    if (lease === undefined) return;
    if (lease.onRecord !== undefined) return lease.onRecord(record);
    if (lease.records.length < MAX_RECORDS) lease.records.push(record);
    else lease.dropped += 1;
  }

  /**
   * The lease whose container sent a packet that bypassed the proxy. By the link-layer address the kernel had for the
   * sender when it came: a lease's own (given at its create) is known at once, however soon its container left, and
   * no other container has it. When that address is no lease's, the packet is another process's pair's (the proxy
   * sends these records to every client) or an unknown container's, unless a lease here does not know its container's
   * yet (a reattach, a move onto the network, until the engine answers): only those are matched by IPv4 address. Of
   * leases that know one IPv4 (or an engine-made link-layer) address, the record goes to the one whose container got
   * it last before `time` (the engine gives a freed address to the next container at once). The engine is asked again
   * only about containers not asked in the last second: a flood of strangers' packets asks it nothing more.
   */
  async #leaseAt(source: string, mac: string | undefined, time: number): Promise<Lease | undefined> {
    const latest = (matches: (lease: Lease) => boolean) => {
      let best: Lease | undefined;
      for (const lease of this.#leases.values())
        if (matches(lease) && !(lease.since > time) && (best === undefined || lease.since > best.since))
          best = lease;
      return best;
    };
    const byMac = () =>
      mac === undefined
        ? undefined
        : ([...this.#leases.values()].find((l) => l.macState === 'own' && l.mac === mac) ??
          latest((l) => l.macState === 'learned' && l.mac === mac));
    const candidates = () =>
      [...this.#leases.values()].filter((l) => mac === undefined || l.macState === 'unknown');
    const byAddress = () => {
      const open = new Set(candidates());
      return latest((l) => open.has(l) && l.address === source);
    };
    const found = byMac();
    if (found !== undefined) return found;
    const waiting = candidates().flatMap((l) => (l.learning !== null ? [l.learning] : []));
    if (waiting.length > 0) await Promise.all(waiting);
    const known = byMac() ?? byAddress();
    if (known !== undefined) return known;
    const now = Date.now();
    const ask = candidates().filter(
      (l) => l.address === null && l.containerId !== null && now - l.askedAt >= ASK_AGAIN_MS,
    );
    if (ask.length === 0) return undefined;
    await Promise.all(ask.map((l) => l.learning ?? this.#learn(l)));
    return byMac() ?? byAddress();
  }
}

/** A link-layer address of our own: random, locally administered (bit 1 of the first octet), unicast (bit 0 clear). */
function localMac(): string {
  const bytes = randomBytes(6);
  bytes[0] = ((bytes[0] ?? 0) & 0xfc) | 0x02;
  return [...bytes].map((b) => b.toString(16).padStart(2, '0')).join(':');
}

function tryConnect(path: string): Promise<net.Socket | null> {
  return new Promise((resolve) => {
    const socket = net.connect(path);
    socket.once('connect', () => resolve(socket));
    socket.once('error', () => resolve(null));
  });
}
