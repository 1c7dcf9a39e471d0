/**
 * The egress proxy as a process of its own (docs/spec.md §5.6): one per host, started by the first pair that needs
 * it, in the engine's network namespace, listening on the egress network's gateway. It outlives the process that
 * started it (a supervisor restart keeps it); it leaves when no client has been connected for `--idle-exit-ms`.
 *
 * Control: a Unix socket (mode 0600) taking JSON lines: `{"op":"register","token","policy"}`,
 * `{"op":"release","token"}`; it answers `{"op":"ok","id"}` and sends every record as `{"op":"record","record"}` to
 * the client that registered its token (records without one, the sink's, to every client: each keeps those of its
 * own containers' addresses). A client's registrations end with its connection: a pair whose supervisor is gone
 * reaches nothing until it is registered again (fail closed); its records meanwhile wait for that registration.
 */
import { chmod, unlink } from 'node:fs/promises';
import net from 'node:net';
import { Resolver } from 'node:dns/promises';
import { parseArgs } from 'node:util';
import { parseEgress, type EgressInput } from '../../core/egress/policy.js';
import { originalDestination } from './conntrack.js';
import { linkAddressOf } from './link-address.js';
import { EGRESS_BRIDGE } from '../../core/egress/egress-network.js';
import { readLines } from './control-lines.js';
import { EgressProxy } from './egress-proxy.js';
import { forbiddenAddresses } from './forbidden-addresses.js';
import { resolveAll } from './resolve-all.js';

const { values } = parseArgs({
  options: {
    listen: { type: 'string' },
    'proxy-port': { type: 'string' },
    'sink-port': { type: 'string' },
    control: { type: 'string' },
    dns: { type: 'string' },
    'idle-exit-ms': { type: 'string', default: '120000' },
  },
});
const listen = values.listen ?? '';
const proxyPort = Number(values['proxy-port']);
const sinkPort = Number(values['sink-port']);
const control = values.control ?? '';
if (listen === '' || control === '' || !(proxyPort > 0) || !(sinkPort > 0)) {
  process.stderr.write(
    'usage: proxy-main --listen ADDR --proxy-port P --sink-port S --control SOCKET [--dns A,B]\n',
  );
  process.exit(2);
}
const resolver = new Resolver({ timeout: 3_000, tries: 2 });
if (values.dns !== undefined && values.dns !== '') resolver.setServers(values.dns.split(','));

const clients = new Set<net.Socket>();
const forbidden = forbiddenAddresses();
const proxy = new EgressProxy({
  listenAddress: listen,
  proxyPort,
  sinkPort,
  resolve: (host) => resolveAll(resolver, host),
  forbidden,
  originalDestination: (proto, source, sourcePort) =>
    originalDestination(proto, source, sourcePort, sinkPort),
  linkAddress: (ip) => linkAddressOf(ip, EGRESS_BRIDGE),
  emit: (record) => {
    const line = `${JSON.stringify({ op: 'record', record })}\n`;
    const token = record.token;
    const owner = token !== undefined ? owners.get(token) : undefined;
    if (owner !== undefined) return void owner.write(line);
    const orphan = token !== undefined ? orphans.get(token) : undefined;
    if (orphan !== undefined && Date.now() < orphan.until) {
      if (orphan.lines.length < ORPHAN_RECORDS) orphan.lines.push(line);
      return;
    }
    for (const client of clients) client.write(line);
  },
});

/**
 * Tokens whose client went away (a supervisor killed mid-pair): refused everything from then on (fail closed), their
 * records kept for ORPHAN_KEEP_MS, at most ORPHAN_RECORDS, and handed to the client that registers the token again
 * (the supervisor that reattaches the pair), so that its egress.jsonl misses none of the attempts made meanwhile.
 */
const ORPHAN_KEEP_MS = 15 * 60_000;
const ORPHAN_RECORDS = 5_000;
const owners = new Map<string, net.Socket>();
const orphans = new Map<string, { lines: string[]; until: number }>();

let idleTimer: NodeJS.Timeout | undefined;
function idle(): void {
  clearTimeout(idleTimer);
  if (clients.size === 0)
    idleTimer = setTimeout(
      () => void proxy.close().then(() => process.exit(0)),
      Number(values['idle-exit-ms']),
    );
}

const server = net.createServer((socket) => {
  clients.add(socket);
  clearTimeout(idleTimer);
  const tokens = new Set<string>();
  readLines(socket, (line) => handle(socket, tokens, line), 1_000_000);
  const gone = () => {
    clients.delete(socket);
    const now = Date.now();
    for (const [token, orphan] of orphans) if (orphan.until <= now) orphans.delete(token);
    for (const token of tokens) {
      proxy.release(token);
      if (owners.get(token) === socket) owners.delete(token);
      orphans.set(token, { lines: [], until: now + ORPHAN_KEEP_MS });
    }
    idle();
  };
  socket.on('close', gone);
  socket.on('error', () => undefined);
});

function handle(socket: net.Socket, tokens: Set<string>, line: string): void {
  let message: { op?: unknown; id?: unknown; token?: unknown; policy?: unknown };
  try {
    message = JSON.parse(line) as typeof message;
  } catch {
    return;
  }
  const reply = (body: Record<string, unknown>): void => {
    socket.write(`${JSON.stringify({ id: message.id, ...body })}\n`);
  };
  if (typeof message.token !== 'string' || message.token.length < 16)
    return reply({ op: 'error', error: 'token' });
  if (message.op === 'register') {
    const parsed = parseEgress(message.policy as EgressInput);
    if (!parsed.ok) return reply({ op: 'error', error: `${parsed.field}: ${parsed.rule}` });
    tokens.add(message.token);
    owners.set(message.token, socket);
    proxy.register(message.token, parsed.policy);
    reply({ op: 'ok' });
    const orphan = orphans.get(message.token);
    orphans.delete(message.token);
    for (const kept of orphan?.lines ?? []) socket.write(kept);
    return;
  }
  if (message.op === 'release') {
    const token = message.token;
    proxy.release(token);
    // The sink's records of the pair's last bypass attempts go out (to this client too) before the answer.
    void proxy.settled().then(() => {
      tokens.delete(token);
      if (owners.get(token) === socket) owners.delete(token);
      reply({ op: 'ok' });
    });
    return;
  }
  reply({ op: 'error', error: 'op' });
}

await proxy.start();
await unlink(control).catch(() => undefined);
await new Promise<void>((resolve) => server.listen(control, resolve));
await chmod(control, 0o600);
process.stdout.write(`ready ${process.pid}\n`);
idle();
for (const signal of ['SIGTERM', 'SIGINT'] as const)
  process.on(signal, () => void proxy.close().then(() => process.exit(0)));
