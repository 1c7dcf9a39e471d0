import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { EgressBroker } from '../../../src/adapters/egress/egress-broker.js';
import type { DockerEgressNetwork } from '../../../src/adapters/egress/docker-egress-network.js';
import { readLines } from '../../../src/adapters/egress/control-lines.js';
import type { EgressRecord, EmittedRecord } from '../../../src/core/egress/record.js';

/**
 * The broker's side of the control socket against a proxy of the test's (the same line protocol, on a real Unix
 * socket): which lease a packet that bypassed the proxy belongs to, found by its container's address.
 */

const GATEWAY = '10.77.0.1';

/** The proxy end: answers register and release, and sends the records the test gives it. */
async function fakeProxy(path: string) {
  const clients: net.Socket[] = [];
  const server = net.createServer((socket) => {
    clients.push(socket);
    socket.on('error', () => undefined);
    readLines(socket, (line) => {
      const message = JSON.parse(line) as { op: string; id: number };
      // A release is answered after the records sent before it (the real proxy answers once the sink has recorded).
      if (message.id !== 0) socket.write(`${JSON.stringify({ op: 'ok', id: message.id })}\n`);
    });
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  return {
    send: (record: EmittedRecord) => {
      for (const c of clients) c.write(`${JSON.stringify({ op: 'record', record })}\n`);
    },
    close: () => {
      for (const c of clients) c.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const direct = (source: string, port: number): EmittedRecord => ({
  time: '2026-12-06T00:00:00.000Z',
  via: 'tcp',
  host: null,
  address: '203.0.113.9',
  port,
  method: null,
  decision: 'refused',
  reason: 'not_through_proxy',
  bytes_up: 0,
  bytes_down: 0,
  source,
});

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('EgressBroker: the records of packets that bypassed the proxy', () => {
  let dir = '';
  let proxy: Awaited<ReturnType<typeof fakeProxy>>;
  /** The engine as the broker asks it: a container's address while it runs, none once it has exited. */
  const engine = new Map<string, string | null>();
  /** The link-layer address the engine reports for a container (a reattached one's, made by an earlier lease). */
  const macs = new Map<string, string>();
  let asked: string[] = [];
  let inspectDelayMs = 0;

  const broker = (closeSettleMs?: number) =>
    new EgressBroker({
      ...(closeSettleMs !== undefined ? { closeSettleMs } : {}),
      network: {
        ensure: () => Promise.resolve(GATEWAY),
        ports: { proxy: 3128, sink: 3129 },
      } as unknown as DockerEgressNetwork,
      controlPath: join(dir, 'egress.sock'),
      command: ['false'],
      logPath: join(dir, 'proxy.log'),
      linkOf: async (id) => {
        asked.push(id);
        const now = engine.get(id) ?? null; // what the engine says when asked, not when it answers
        await pause(inspectDelayMs);
        return { address: now, mac: now === null ? null : (macs.get(id) ?? null) };
      },
    });

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-broker-'));
    proxy = await fakeProxy(join(dir, 'egress.sock'));
    engine.clear();
    macs.clear();
    asked = [];
    inspectDelayMs = 0;
  });

  afterEach(async () => {
    vi.useRealTimers();
    await proxy.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("a pair's last act, a direct connection, is kept though its container has exited when the record comes (200 tries, 20 pairs at a time)", async () => {
    const gate = broker(0);
    const pair = async (i: number) => {
      const kept: EgressRecord[] = [];
      const lease = await gate.open(
        { mode: 'allowlist', allow: ['a.test'] },
        `token-${i}-${'x'.repeat(16)}`,
        (r) => kept.push(r),
      );
      const id = `c${i}`;
      const address = `10.77.${i >> 8}.${(i & 255) + 2}`;
      lease.attach(id); // at the create: the engine has no address for it yet
      engine.set(id, address); // started
      lease.started();
      engine.set(id, null); // exited at once, before its packet's record comes
      proxy.send(direct(address, 81));
      const closed = await lease.close();
      return { i, ports: kept.map((r) => r.port), held: closed.records.length };
    };
    for (let wave = 0; wave < 10; wave++) {
      const results = await Promise.all(Array.from({ length: 20 }, (_, k) => pair(wave * 20 + k)));
      for (const r of results) expect(r, `try ${r.i}`).toEqual({ i: r.i, ports: [81], held: 0 });
    }
  });

  it('a record that comes while the address is being asked waits for that answer (no second question after the exit)', async () => {
    const gate = broker();
    const kept: EgressRecord[] = [];
    const lease = await gate.open({ mode: 'allowlist', allow: ['a.test'] }, 't'.repeat(32), (r) =>
      kept.push(r),
    );
    inspectDelayMs = 150;
    lease.attach('c1');
    engine.set('c1', '10.77.0.9');
    lease.started();
    engine.set('c1', null);
    proxy.send(direct('10.77.0.9', 81));
    await lease.close();
    expect(kept.map((r) => r.port)).toEqual([81]);
    expect(asked).toEqual(['c1']);
  });

  it("a reattached pair (a new client of the proxy) learns its running container's address at once", async () => {
    const gate = broker();
    const kept: EgressRecord[] = [];
    const lease = await gate.open({ mode: 'allowlist', allow: ['a.test'] }, 'r'.repeat(32), (r) =>
      kept.push(r),
    );
    engine.set('c7', '10.77.0.7');
    lease.attach('c7');
    lease.started();
    await pause(20);
    engine.set('c7', null);
    proxy.send(direct('10.77.0.7', 81));
    await lease.close();
    expect(kept).toHaveLength(1);
    expect(kept[0]).toMatchObject({ source: '10.77.0.7', port: 81, reason: 'not_through_proxy' });
  });

  it('records keep the order the proxy sent them in, when the first waits for an address', async () => {
    const gate = broker();
    const kept: EgressRecord[] = [];
    const token = 'o'.repeat(32);
    const lease = await gate.open({ mode: 'allowlist', allow: ['a.test'] }, token, (r) => kept.push(r));
    inspectDelayMs = 100;
    lease.attach('c1');
    engine.set('c1', '10.77.0.3');
    proxy.send(direct('10.77.0.3', 1)); // no address known yet: asked now
    proxy.send({ ...direct('10.77.0.3', 2), token }); // by token: no question
    proxy.send(direct('10.77.0.3', 3));
    await lease.close();
    expect(kept.map((r) => r.port)).toEqual([1, 2, 3]);
  });

  it("two leases: each packet goes to the lease of its container's address, none to the other, none kept without one", async () => {
    const gate = broker();
    const a: EgressRecord[] = [];
    const b: EgressRecord[] = [];
    const la = await gate.open({ mode: 'allowlist', allow: ['a.test'] }, 'a'.repeat(32), (r) => a.push(r));
    const lb = await gate.open({ mode: 'allowlist', allow: ['a.test'] }, 'b'.repeat(32), (r) => b.push(r));
    engine.set('ca', '10.77.0.10');
    engine.set('cb', '10.77.0.11');
    la.attach('ca');
    la.started();
    lb.attach('cb');
    lb.started();
    engine.set('ca', null);
    engine.set('cb', null);
    proxy.send(direct('10.77.0.11', 11));
    proxy.send(direct('10.77.0.10', 10));
    proxy.send(direct('10.77.0.99', 99)); // nobody's
    await la.close();
    await lb.close();
    expect(a.map((r) => r.port)).toEqual([10]);
    expect(b.map((r) => r.port)).toEqual([11]);
  });

  it('an address the engine gave the next container at once: each packet goes to the container that had it when it came', async () => {
    vi.useFakeTimers({ toFake: ['Date'] }); // the moments of the starts; timers stay real
    const gate = broker();
    const a: EgressRecord[] = [];
    const b: EgressRecord[] = [];
    const at = (ms: number) => new Date(ms).toISOString();
    const la = await gate.open({ mode: 'allowlist', allow: ['a.test'] }, 'a'.repeat(32), (r) => a.push(r));
    la.attach('ca');
    engine.set('ca', '10.77.0.2');
    vi.setSystemTime(1_000);
    la.starting();
    la.started();
    await pause(10);
    engine.set('ca', null); // exited; its lease is still closing when the next pair starts
    const lb = await gate.open({ mode: 'allowlist', allow: ['a.test'] }, 'b'.repeat(32), (r) => b.push(r));
    lb.attach('cb');
    engine.set('cb', '10.77.0.2'); // the same address, at once
    inspectDelayMs = 100;
    vi.setSystemTime(2_000);
    lb.starting();
    vi.setSystemTime(2_100);
    lb.started();
    proxy.send({ ...direct('10.77.0.2', 1), time: at(2_500) }); // b's, while its address is still being asked
    proxy.send({ ...direct('10.77.0.2', 2), time: at(1_500) }); // a's last, before b's start was asked
    proxy.send({ ...direct('10.77.0.2', 3), time: at(500) }); // before either: nobody's
    await la.close();
    await lb.close();
    expect(a.map((r) => r.port)).toEqual([2]);
    expect(b.map((r) => r.port)).toEqual([1]);
  });

  it("by its link-layer address (the lease's own, given at the create), a packet is its container's though the engine was never asked (gone before it could be) and another lease has its IPv4 address now; a link-layer address no lease has is another process's pair's", async () => {
    const gate = broker(0);
    const a: EgressRecord[] = [];
    const b: EgressRecord[] = [];
    const la = await gate.open({ mode: 'allowlist', allow: ['a.test'] }, 'a'.repeat(32), (r) => a.push(r));
    const lb = await gate.open({ mode: 'allowlist', allow: ['a.test'] }, 'b'.repeat(32), (r) => b.push(r));
    expect(la.mac).toMatch(/^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/);
    expect(Number.parseInt(la.mac.slice(0, 2), 16) & 0x3).toBe(0x2); // locally administered, unicast
    expect(la.mac).not.toBe(lb.mac);
    la.attach('ca', true); // created with la.mac, started, exited: never asked
    lb.attach('cb', true);
    engine.set('cb', '10.77.0.2');
    lb.starting();
    lb.started(); // the address a's container had, now b's
    await pause(20);
    const time = new Date().toISOString(); // after b's start was asked
    proxy.send({ ...direct('10.77.0.2', 1), time, mac: la.mac });
    proxy.send({ ...direct('10.77.0.2', 2), time, mac: lb.mac });
    proxy.send({ ...direct('10.77.0.2', 3), time, mac: '02:00:5e:00:00:99' }); // another process's container
    proxy.send({ ...direct('10.77.0.2', 4), time }); // no link-layer address read: by IPv4 address
    await la.close();
    await lb.close();
    expect(a.map((r) => r.port)).toEqual([1]);
    expect(b.map((r) => r.port)).toEqual([2, 4]);
    expect(a[0]).not.toHaveProperty('mac'); // never written
  });

  it("a flood of strangers' packets asks the engine nothing more than once a second, and a lease's close is not held by it", async () => {
    const gate = broker(0);
    const kept: EgressRecord[] = [];
    const lease = await gate.open({ mode: 'allowlist', allow: ['a.test'] }, 'f'.repeat(32), (r) =>
      kept.push(r),
    );
    lease.attach('gone'); // a reattached container that had exited: its addresses are never learned
    lease.started();
    await pause(20);
    const before = asked.length;
    for (let i = 0; i < 500; i++) proxy.send({ ...direct('10.77.9.9', i), mac: '02:00:5e:00:00:01' });
    const started = Date.now();
    await lease.close();
    expect(Date.now() - started).toBeLessThan(4_000);
    expect(asked.length - before).toBeLessThanOrEqual(2);
    expect(kept).toEqual([]);
  });

  it("a reattached lease learns its container's link-layer address (made by the lease before it) from the engine", async () => {
    const gate = broker(0);
    const kept: EgressRecord[] = [];
    const lease = await gate.open({ mode: 'allowlist', allow: ['a.test'] }, 'q'.repeat(32), (r) =>
      kept.push(r),
    );
    engine.set('c9', '10.77.0.9');
    macs.set('c9', '02:AA:BB:CC:DD:09');
    lease.attach('c9');
    lease.started();
    await pause(20);
    engine.set('c9', null);
    proxy.send({ ...direct('10.77.0.50', 9), mac: '02:aa:bb:cc:dd:09' });
    await lease.close();
    expect(kept.map((r) => r.port)).toEqual([9]);
  });

  it('the same container attached again keeps its address; a new container is asked for its own', async () => {
    const gate = broker();
    const kept: EgressRecord[] = [];
    const lease = await gate.open({ mode: 'allowlist', allow: ['a.test'] }, 's'.repeat(32), (r) =>
      kept.push(r),
    );
    engine.set('c1', '10.77.0.20');
    lease.attach('c1');
    lease.started();
    await pause(10);
    engine.set('c1', null);
    lease.attach('c1');
    proxy.send(direct('10.77.0.20', 20));
    await pause(50);
    expect(kept.map((r) => r.port)).toEqual([20]);
    engine.set('c2', '10.77.0.21');
    lease.attach('c2');
    proxy.send(direct('10.77.0.20', 200)); // the old container's address: not the lease's any more
    proxy.send(direct('10.77.0.21', 21));
    await lease.close();
    expect(kept.map((r) => r.port)).toEqual([20, 21]);
  });
});
