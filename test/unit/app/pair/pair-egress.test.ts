import { describe, expect, it } from 'vitest';
import { fakeEgressLease } from '../../../support/fake-egress-lease.js';
import { fakeTime } from '../../../support/fake-time.js';
import { PairEgress } from '../../../../src/app/pair/pair-egress.js';
import { EngineError } from '../../../../src/app/ports/engine-error.js';
import type { ContainerRuntime, ContainerSpec } from '../../../../src/app/ports/container-runtime.js';
import type { EgressGate } from '../../../../src/app/ports/egress.js';
import { effectiveEgress } from '../../../../src/core/egress/policy.js';
import { readClientHello } from '../../../../src/core/egress/tls-sni.js';
import { findOriginal, dnsQuestion } from '../../../../src/adapters/egress/conntrack.js';
import { parseAuthority, tokenOf } from '../../../../src/adapters/egress/proxy-request.js';

const allowlist = effectiveEgress('bridge', { mode: 'allowlist', allow: ['api.openai.com'] });

function recordingRuntime(created: ContainerSpec[]): ContainerRuntime {
  return {
    create: (spec: ContainerSpec) => {
      created.push(spec);
      return Promise.resolve({ id: 'c1', name: spec.name });
    },
  } as unknown as ContainerRuntime;
}

describe('PairEgress', () => {
  it('without a proxy (swarm), an allowlisted pair fails closed before any container exists', async () => {
    const created: ContainerSpec[] = [];
    const egress = new PairEgress({ clock: fakeTime().clock }, allowlist);
    const err = await egress
      .wrap(recordingRuntime(created))
      .create({ name: 'x', env: {} } as ContainerSpec)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EngineError);
    expect((err as EngineError).fault).toBe('engine_error');
    expect((err as Error).message).toContain('allowlist');
    expect(created).toEqual([]);
  });

  it('an allowlisted container gets the proxy variables, the gateway as DNS and the egress network; open is untouched', async () => {
    const created: ContainerSpec[] = [];
    const gate: EgressGate = {
      open: (_policy, token) => Promise.resolve(fakeEgressLease(token)),
    };
    const egress = new PairEgress({ egress: gate, clock: fakeTime().clock }, allowlist);
    await egress
      .wrap(recordingRuntime(created))
      .create({ name: 'x', env: { A: '1' } } as unknown as ContainerSpec);
    expect(created[0]).toMatchObject({
      env: { A: '1', HTTP_PROXY: `http://rg:${egress.token}@10.0.0.1:3128` },
      dns: ['10.0.0.1'],
      network: 'allowlist',
      macAddress: '02:00:00:00:00:01',
    });
    const open = new PairEgress(
      { egress: gate, clock: fakeTime().clock },
      effectiveEgress('bridge', undefined),
    );
    const rt = recordingRuntime([]);
    expect(open.wrap(rt)).toBe(rt);
  });
  it("the lease learns its container's address once it runs: after the start (the engine says none before), and at a reattach", async () => {
    const steps: string[] = [];
    const gate: EgressGate = {
      open: (_policy, token) =>
        Promise.resolve(
          fakeEgressLease(token, {
            attach: (id) => void steps.push(`attach ${id}`),
            starting: () => void steps.push('starting'),
            started: () => void steps.push('started'),
          }),
        ),
    };
    const runtime = {
      create: (spec: ContainerSpec) => {
        steps.push('create');
        return Promise.resolve({ id: 'c1', name: spec.name });
      },
      start: (id: string) => {
        steps.push(`start ${id}`);
        return Promise.resolve();
      },
    } as unknown as ContainerRuntime;
    const egress = new PairEgress({ egress: gate, clock: fakeTime().clock }, allowlist);
    const wrapped = egress.wrap(runtime);
    await wrapped.create({ name: 'x', env: {} } as unknown as ContainerSpec);
    await wrapped.start('c1');
    expect(steps).toEqual(['create', 'attach c1', 'starting', 'start c1', 'started']);
    steps.length = 0;
    const failing = {
      ...runtime,
      start: () => Promise.reject(new Error('the engine refused the start')),
    } as unknown as ContainerRuntime;
    await expect(egress.wrap(failing).start('c1')).rejects.toThrow('refused');
    expect(steps).toEqual(['starting']);
    steps.length = 0;
    await new PairEgress({ egress: gate, clock: fakeTime().clock }, allowlist).reattach('c2');
    expect(steps).toEqual(['attach c2', 'started']);
  });
});

describe('the proxy readers', () => {
  it('reads the SNI of a ClientHello, waits for an incomplete one, refuses what is not TLS', () => {
    const name = Buffer.from('api.openai.com');
    const u16 = (n: number) => Buffer.from([n >> 8, n & 255]);
    const ext = Buffer.concat([
      Buffer.from([0, 0]),
      u16(name.length + 5),
      u16(name.length + 3),
      Buffer.from([0]),
      u16(name.length),
      name,
    ]);
    const body = Buffer.concat([
      Buffer.from([3, 3]),
      Buffer.alloc(32),
      Buffer.from([0]),
      u16(2),
      Buffer.from([0, 0x2f]),
      Buffer.from([1, 0]),
      u16(ext.length),
      ext,
    ]);
    const hs = Buffer.concat([Buffer.from([1, 0]), u16(body.length), body]);
    const record = Buffer.concat([Buffer.from([0x16, 3, 1]), u16(hs.length), hs]);
    expect(readClientHello(record)).toEqual({ state: 'hello', sni: 'api.openai.com' });
    expect(readClientHello(record.subarray(0, 20))).toEqual({ state: 'incomplete' });
    expect(readClientHello(Buffer.from('GET / HTTP/1.1\r\n'))).toEqual({ state: 'not_tls' });
  });

  it('finds the original destination in the connection table, the DNS question, the token, the authority', () => {
    const table =
      'ipv4     2 tcp      6 118 SYN_RECV src=172.18.0.2 dst=198.18.1.10 sport=40000 dport=80 src=172.18.0.1 dst=172.18.0.2 sport=3129 dport=40000 mark=0 use=2\n';
    expect(findOriginal(table, 'tcp', '172.18.0.2', 40000, 3129)).toEqual({
      address: '198.18.1.10',
      port: 80,
    });
    expect(findOriginal(table, 'tcp', '172.18.0.2', 40001, 3129)).toBeNull();
    const query = Buffer.concat([
      Buffer.alloc(12),
      Buffer.from([3]),
      Buffer.from('api'),
      Buffer.from([4]),
      Buffer.from('test'),
      Buffer.from([0, 0, 1, 0, 1]),
    ]);
    expect(dnsQuestion(query)).toBe('api.test');
    expect(tokenOf(`Basic ${Buffer.from('rg:abc').toString('base64')}`)).toBe('abc');
    expect(tokenOf('Bearer x')).toBeUndefined();
    expect(parseAuthority('[2001:DB8::1]:443')).toEqual({ host: '2001:db8::1', port: 443 });
    expect(parseAuthority('a.test:0')).toBeNull();
  });
});
