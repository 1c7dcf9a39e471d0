import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { fakeEgressLease } from '../../support/fake-egress-lease.js';
import { fakeTime } from '../../support/fake-time.js';
import { NodeFileSystem } from '../../../src/adapters/fs/node-file-system.js';
import { EvidenceStore } from '../../../src/app/evidence/evidence-store.js';
import { PairEgress } from '../../../src/app/pair/pair-egress.js';
import type { ContainerRuntime, ContainerSpec } from '../../../src/app/ports/container-runtime.js';
import type { EgressGate } from '../../../src/app/ports/egress.js';
import { effectiveEgress } from '../../../src/core/egress/policy.js';
import type { EgressRecord } from '../../../src/core/egress/record.js';
import { textRedactor } from '../../../src/core/redaction/redact-text.js';

const allowlist = effectiveEgress('bridge', { mode: 'allowlist', allow: ['allowed.test'] });
const SECRET = 'sk-unit-egress-0123456789';

function record(over: Partial<EgressRecord>): EgressRecord {
  return {
    time: '2026-01-01T00:00:00.000Z',
    via: 'http',
    host: 'allowed.test',
    address: '198.18.1.10',
    port: 80,
    method: 'GET',
    decision: 'allowed',
    bytes_up: 0,
    bytes_down: 0,
    source: '172.30.0.2',
    ...over,
  };
}

/** A gate that hands each lease's record listener to the test (as the proxy's records arrive). */
function recordingGate(): EgressGate & {
  opened: { token: string; emit: (r: EgressRecord) => void; containers: string[] }[];
} {
  const opened: { token: string; emit: (r: EgressRecord) => void; containers: string[] }[] = [];
  return {
    opened,
    open: (_policy, token, onRecord) => {
      const entry = { token, emit: onRecord ?? (() => undefined), containers: [] as string[] };
      opened.push(entry);
      return Promise.resolve(fakeEgressLease(token, { attach: (id) => void entry.containers.push(id) }));
    },
  };
}

function runtimeWithEnv(env: Record<string, string> | null): ContainerRuntime {
  return {
    create: (spec: ContainerSpec) => Promise.resolve({ id: 'c1', name: spec.name }),
    environmentOf: () => Promise.resolve(env),
  } as unknown as ContainerRuntime;
}

describe('egress.jsonl as the attempts happen (issue 42)', () => {
  let root = '';
  afterEach(async () => {
    if (root !== '') await rm(root, { recursive: true, force: true });
  });

  it('appends each record, masked, as it arrives (before the pair ends); the summary is read back from the file', async () => {
    root = await mkdtemp(join(tmpdir(), 'rg-eglog-'));
    const store = new EvidenceStore(new NodeFileSystem(), root);
    const gate = recordingGate();
    const egress = new PairEgress({ egress: gate, clock: fakeTime().clock }, allowlist);
    egress.begin(store, '.', textRedactor([SECRET, egress.token]));
    await egress.wrap(runtimeWithEnv(null)).create({ name: 'x', env: {} } as unknown as ContainerSpec);
    const lease = gate.opened[0];
    lease?.emit(record({ target: `http://allowed.test/?k=${SECRET}` }));
    lease?.emit(record({ host: `${SECRET}.evil.test`, decision: 'refused', reason: 'host_not_allowed' }));
    let text = '';
    for (let i = 0; i < 50 && text.split('\n').length < 3; i++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
      text = await readFile(join(root, 'egress.jsonl'), 'utf8');
    }
    expect(text.trim().split('\n')).toHaveLength(2);
    expect(text).not.toContain(SECRET);
    const summary = await egress.finish(store, '.', textRedactor([SECRET]));
    expect(summary).toMatchObject({ mode: 'allowlist', allowed: 1, refused: 1 });
    expect(summary?.refused_hosts[0]).not.toContain(SECRET);
  });

  it('a reattached pair keeps the token its container holds, is registered again, and appends after the lines already there', async () => {
    root = await mkdtemp(join(tmpdir(), 'rg-eglog-'));
    const store = new EvidenceStore(new NodeFileSystem(), root);
    const before = `${JSON.stringify(record({ target: 'http://allowed.test/before' }))}\n`;
    await writeFile(join(root, 'egress.jsonl'), before, { mode: 0o600 });
    const token = 'a'.repeat(48);
    const gate = recordingGate();
    const egress = new PairEgress({ egress: gate, clock: fakeTime().clock }, allowlist);
    expect(await egress.adopt(runtimeWithEnv({ HTTP_PROXY: `http://rg:${token}@10.0.0.1:3128` }), 'c9')).toBe(
      true,
    );
    expect(egress.token).toBe(token);
    egress.begin(store, '.', textRedactor([token]));
    await egress.reattach('c9');
    expect(gate.opened).toMatchObject([{ token, containers: ['c9'] }]);
    gate.opened[0]?.emit(record({ decision: 'refused', reason: 'unknown_client', target: 'http://x/' }));
    const summary = await egress.finish(store, '.', textRedactor([token]));
    expect(summary).toMatchObject({ allowed: 1, refused: 1 });
    const text = await readFile(join(root, 'egress.jsonl'), 'utf8');
    expect(text.startsWith(before)).toBe(true);
    // A container without the proxy's variables keeps a fresh token: the proxy does not know it (fail closed).
    const other = new PairEgress({ egress: recordingGate(), clock: fakeTime().clock }, allowlist);
    expect(await other.adopt(runtimeWithEnv({}), 'c1')).toBe(false);
  });
});
