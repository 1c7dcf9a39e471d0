import dgram from 'node:dgram';
import http from 'node:http';
import net from 'node:net';
import {
  decide,
  hostKind,
  normalHost,
  type EgressPolicy,
  type EgressRefusal,
} from '../../core/egress/policy.js';
import { MAX_HELLO_BYTES, readClientHello } from '../../core/egress/tls-sni.js';
import { dnsQuestion } from './conntrack.js';
import { absoluteTarget, parseAuthority, sameAuthority, tokenOf } from './proxy-request.js';
import { forwardRequest, UPSTREAM_CONNECT_TIMEOUT_MS } from './proxy-forward.js';
import type { EgressRecord, EmittedRecord } from '../../core/egress/record.js';

/** How long a tunnel's client may take to send its ClientHello before it is refused. */
const HELLO_TIMEOUT_MS = 10_000;

export interface EgressProxyOptions {
  readonly listenAddress: string;
  readonly proxyPort: number;
  readonly sinkPort: number;
  /** The proxy's own resolver (a pair's DNS never decides where we connect). */
  readonly resolve: (host: string) => Promise<readonly string[]>;
  /** Addresses never connected to, whatever a name resolves to (the host, its bridges, metadata, loopback). */
  readonly forbidden: (address: string) => boolean;
  readonly originalDestination: (
    proto: 'tcp' | 'udp',
    source: string,
    sourcePort: number,
  ) => Promise<{ address: string; port: number } | null>;
  readonly emit: (record: EmittedRecord) => void;
  /** A neighbour's link-layer address now (src/adapters/egress/link-address.ts); absent: none is given. */
  readonly linkAddress?: (ip: string) => string | null;
}

/**
 * The filtering forward proxy (docs/spec.md §5.6): plain HTTP requests in absolute form and `CONNECT` tunnels, each
 * from a client named by the token in its `Proxy-Authorization`, each decided by that client's policy; the name is
 * resolved here; a tunnel carries TLS only, to the server its ClientHello names, which must be the host asked. The
 * sink takes every other TCP connection and UDP datagram of an allowlisted pair (our firewall sends them there):
 * recorded, refused.
 */
export class EgressProxy {
  readonly #options: EgressProxyOptions;
  readonly #clients = new Map<string, EgressPolicy>();
  readonly #server: http.Server;
  readonly #sink: net.Server;
  readonly #udp: dgram.Socket;
  readonly #sockets = new Set<net.Socket>();
  /** The sink's connections and datagrams not yet recorded (their original destination still being looked up). */
  readonly #sinking = new Set<Promise<void>>();

  constructor(options: EgressProxyOptions) {
    this.#options = options;
    this.#server = http.createServer((req, res) => void this.#request(req, res));
    this.#server.on('connect', (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
      void this.#connect(req, socket, head);
    });
    this.#server.on('connection', (socket: net.Socket) => this.#track(socket));
    this.#server.on('clientError', (_err, socket) => socket.destroy());
    this.#sink = net.createServer((socket) => this.#sinkWork(this.#sinkTcp(socket)));
    this.#udp = dgram.createSocket('udp4');
    this.#udp.on('message', (message, remote) => this.#sinkWork(this.#sinkUdp(message, remote)));
  }

  /** Each client's connections (tunnels, plain requests): cut when its policy changes (a tunnel is decided once). */
  readonly #open = new Map<string, Set<net.Socket>>();
  register(token: string, policy: EgressPolicy): void {
    const before = this.#clients.get(token);
    this.#clients.set(token, policy);
    if (before !== undefined && JSON.stringify(before) !== JSON.stringify(policy)) this.#cut(token);
  }

  release(token: string): void {
    this.#clients.delete(token);
    this.#cut(token);
  }

  #cut(token: string): void {
    for (const socket of this.#open.get(token) ?? []) socket.destroy();
    this.#open.delete(token);
  }

  #hold(token: string | undefined, socket: net.Socket): void {
    const set = token === undefined ? new Set<net.Socket>() : (this.#open.get(token) ?? new Set());
    if (token !== undefined) this.#open.set(token, set.add(socket));
    socket.once('close', () => set.delete(socket));
  }

  async start(): Promise<void> {
    const { listenAddress, proxyPort, sinkPort } = this.#options;
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(proxyPort, listenAddress, () => resolve());
    });
    await new Promise<void>((resolve, reject) => {
      this.#sink.once('error', reject);
      this.#sink.listen(sinkPort, listenAddress, () => resolve());
    });
    await new Promise<void>((resolve, reject) => {
      this.#udp.once('error', reject);
      this.#udp.bind(sinkPort, listenAddress, () => resolve());
    });
  }

  #sinkWork(work: Promise<void>): void {
    this.#sinking.add(work);
    void work.finally(() => this.#sinking.delete(work));
  }

  /**
   * Resolves once everything the sink took so far is recorded (emitted), at most `limitMs` later: a client releasing a
   * lease asks this first, so the records of a pair's last bypass attempts reach it before the lease closes.
   */
  async settled(limitMs = 5_000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const limit = new Promise<void>((resolve) => (timer = setTimeout(resolve, limitMs)));
    await Promise.race([Promise.allSettled([...this.#sinking]), limit]);
    clearTimeout(timer);
  }

  async close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy();
    await Promise.all([
      new Promise((resolve) => this.#server.close(resolve)),
      new Promise((resolve) => this.#sink.close(resolve)),
      new Promise((resolve) => this.#udp.close(() => resolve(undefined))),
    ]);
  }

  #track(socket: net.Socket): void {
    this.#sockets.add(socket);
    socket.on('close', () => this.#sockets.delete(socket));
    socket.on('error', () => undefined);
  }

  /**
   * `arrival`: for the sink's records, when the attempt came (earlier than now: after its lookup) and the sender's
   * link-layer address then.
   */
  #emit(
    record: Omit<EgressRecord, 'time'>,
    token: string | undefined,
    arrival: { at: Date; mac: string | null } = { at: new Date(), mac: null },
  ): void {
    this.#options.emit({
      time: arrival.at.toISOString(),
      ...record,
      ...(token !== undefined ? { token } : {}),
      ...(arrival.mac !== null ? { mac: arrival.mac } : {}),
    });
  }

  /** The moment a packet came to the sink, and who sent it (asked before anything else runs: it may leave soon). */
  #arrival(source: string): { at: Date; mac: string | null } {
    return { at: new Date(), mac: this.#options.linkAddress?.(source) ?? null };
  }

  #client(header: string | undefined): { token: string | undefined; policy: EgressPolicy | undefined } {
    const token = tokenOf(header);
    return { token, policy: token !== undefined ? this.#clients.get(token) : undefined };
  }

  /** The first address of `host` we may connect to; a literal is itself. */
  async #address(host: string): Promise<{ address: string } | { refusal: EgressRefusal }> {
    const h = normalHost(host);
    let addresses: readonly string[];
    if (hostKind(h) !== 'name') addresses = [h];
    else {
      try {
        addresses = await this.#options.resolve(h);
      } catch {
        return { refusal: 'resolve_failed' };
      }
    }
    if (addresses.length === 0) return { refusal: 'resolve_failed' };
    const usable = addresses.find((a) => !this.#options.forbidden(a));
    return usable === undefined ? { refusal: 'forbidden_address' } : { address: usable };
  }

  async #request(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const source = req.socket.remoteAddress ?? '';
    const method = req.method ?? 'GET';
    const { token, policy } = this.#client(req.headers['proxy-authorization']);
    const parsed = absoluteTarget(req.url ?? '');
    const host = parsed?.host ?? null;
    const port = parsed?.port ?? null;
    const base = { via: 'http' as const, host, port, method, target: req.url ?? '', source, sni: null };
    const refuse = (reason: EgressRefusal, status: number, address: string | null = null) => {
      this.#emit({ ...base, address, decision: 'refused', reason, bytes_up: 0, bytes_down: 0 }, token);
      res.writeHead(status, { 'content-type': 'text/plain', connection: 'close' });
      res.end(`roboguide egress: refused (${reason})\n`);
      req.resume();
    };
    if (policy === undefined) return refuse('unknown_client', 407);
    if (parsed === null || parsed.url.protocol !== 'http:') return refuse('bad_request', 400);
    const hostHeader = req.headers.host;
    if (hostHeader === undefined || !sameAuthority(hostHeader, parsed.host, parsed.port))
      return refuse('host_header_mismatch', 403);
    const verdict = decide(policy, parsed.host, parsed.port, method);
    if (!verdict.allowed) return refuse(verdict.reason, 403);
    this.#hold(token, req.socket);
    const target = await this.#address(parsed.host);
    if ('refusal' in target) return refuse(target.refusal, 403);
    const path = `${parsed.url.pathname}${parsed.url.search}`;
    forwardRequest(req, res, { address: target.address, port: parsed.port, path }, (forwarded) =>
      this.#emit(
        {
          ...base,
          address: target.address,
          decision: 'allowed',
          ...(forwarded.status !== undefined ? { status: forwarded.status } : {}),
          bytes_up: forwarded.bytesUp,
          bytes_down: forwarded.bytesDown,
        },
        token,
      ),
    );
  }

  async #connect(req: http.IncomingMessage, socket: net.Socket, head: Buffer): Promise<void> {
    this.#track(socket);
    const source = socket.remoteAddress ?? '';
    const { token, policy } = this.#client(req.headers['proxy-authorization']);
    const authority = parseAuthority(req.url ?? '');
    const base = {
      via: 'connect' as const,
      host: authority?.host ?? null,
      port: authority?.port ?? null,
      method: null,
      source,
    };
    const refuse = (reason: EgressRefusal, answer: string | null, extra: Partial<EgressRecord> = {}) => {
      this.#emit(
        {
          ...base,
          address: null,
          sni: null,
          decision: 'refused',
          reason,
          bytes_up: 0,
          bytes_down: 0,
          ...extra,
        },
        token,
      );
      if (answer !== null) socket.end(`HTTP/1.1 ${answer}\r\nConnection: close\r\n\r\n`);
      else socket.destroy();
    };
    if (policy === undefined) return refuse('unknown_client', '407 Proxy Authentication Required');
    if (authority === null) return refuse('bad_request', '400 Bad Request');
    const verdict = decide(policy, authority.host, authority.port, null);
    if (!verdict.allowed) return refuse(verdict.reason, '403 Forbidden');
    this.#hold(token, socket);
    socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    const hello = await firstHello(socket, head);
    if (hello.read.state !== 'hello') return refuse('not_tls', null);
    const sni = hello.read.sni;
    if (
      hostKind(authority.host) === 'name' ? sni === null || normalHost(sni) !== authority.host : sni !== null
    )
      return refuse('sni_mismatch', null, { sni });
    const target = await this.#address(authority.host);
    if ('refusal' in target) return refuse(target.refusal, null, { sni });
    let up = hello.bytes.length;
    let down = 0;
    const upstream = net.connect({
      host: target.address,
      port: authority.port,
      timeout: UPSTREAM_CONNECT_TIMEOUT_MS,
    });
    this.#track(upstream);
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      socket.destroy();
      upstream.destroy();
      this.#emit(
        { ...base, address: target.address, sni, decision: 'allowed', bytes_up: up, bytes_down: down },
        token,
      );
    };
    upstream.once('connect', () => {
      upstream.setTimeout(0);
      upstream.write(hello.bytes);
      socket.on('data', (chunk: Buffer) => (up += chunk.length));
      upstream.on('data', (chunk: Buffer) => (down += chunk.length));
      socket.pipe(upstream);
      upstream.pipe(socket);
    });
    upstream.on('timeout', () => upstream.destroy());
    upstream.on('close', finish);
    socket.on('close', finish);
  }

  async #sinkTcp(socket: net.Socket): Promise<void> {
    // Its arrival: the broker tells the container that had the address then from the one that has it now.
    const source = socket.remoteAddress ?? '';
    const arrival = this.#arrival(source);
    this.#track(socket);
    const original = await this.#options.originalDestination('tcp', source, socket.remotePort ?? 0);
    socket.destroy();
    this.#emit(
      {
        via: 'tcp',
        host: null,
        address: original?.address ?? null,
        port: original?.port ?? null,
        method: null,
        decision: 'refused',
        reason: 'not_through_proxy',
        bytes_up: 0,
        bytes_down: 0,
        source,
      },
      undefined,
      arrival,
    );
  }

  async #sinkUdp(message: Buffer, remote: dgram.RemoteInfo): Promise<void> {
    const arrival = this.#arrival(remote.address);
    const original = await this.#options.originalDestination('udp', remote.address, remote.port);
    this.#emit(
      {
        via: 'udp',
        host: original?.port === 53 ? dnsQuestion(message) : null,
        address: original?.address ?? null,
        port: original?.port ?? null,
        method: null,
        decision: 'refused',
        reason: 'not_through_proxy',
        bytes_up: message.length,
        bytes_down: 0,
        source: remote.address,
      },
      undefined,
      arrival,
    );
  }
}

async function firstHello(
  socket: net.Socket,
  head: Buffer,
): Promise<{ read: ReturnType<typeof readClientHello>; bytes: Buffer }> {
  let bytes = head;
  let read = readClientHello(bytes);
  if (read.state !== 'incomplete') return { read, bytes };
  return new Promise((resolve) => {
    const timer = setTimeout(() => done({ state: 'not_tls' }), HELLO_TIMEOUT_MS);
    const onData = (chunk: Buffer) => {
      bytes = Buffer.concat([bytes, chunk]);
      read = bytes.length > MAX_HELLO_BYTES ? { state: 'not_tls' } : readClientHello(bytes);
      if (read.state !== 'incomplete') done(read);
    };
    const done = (final: ReturnType<typeof readClientHello>) => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('close', onClose);
      socket.pause();
      resolve({ read: final, bytes });
    };
    const onClose = () => done({ state: 'not_tls' });
    socket.on('data', onData);
    socket.once('close', onClose);
  });
}
