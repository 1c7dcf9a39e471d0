import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { nodeMatches, type RawNode } from '../../src/adapters/swarm/node-constraints.js';
import { admitOnNodes } from '../../src/app/admission.js';

let tmp: string;
let registry: SqliteCapacityRegistry;
const request = (claimId: string, ports: number[] = []) => ({
  batchId: 'b1',
  jobId: `j-${claimId}`,
  claimId,
  gpuMib: 0,
  ports,
});

beforeEach(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'rg-admit-nodes-'));
  registry = SqliteCapacityRegistry.open({ path: join(tmp, 'registry.db') });
});
afterEach(async () => {
  await registry.close();
  await rm(tmp, { recursive: true, force: true });
});

describe('admission on swarm nodes (admitOnNodes)', () => {
  it('reserves on the first node with room, and records that node on the reservation', async () => {
    await registry.setLimits({ maxReservations: 1, gpuMib: null });
    const first = await admitOnNodes(registry, request('c1'), ['node-a', 'node-b']);
    const second = await admitOnNodes(registry, request('c2'), ['node-a', 'node-b']);
    expect(first.node).toBe('node-a');
    expect(second.node).toBe('node-b');
    expect((await registry.reservationForClaim('c1'))?.node).toBe('node-a');
    expect((await registry.reservationForClaim('c2'))?.node).toBe('node-b');
  });

  it("every node full: refused with the last node's reason, nothing held for the refused claim", async () => {
    await registry.setLimits({ maxReservations: 1, gpuMib: null });
    await admitOnNodes(registry, request('c1'), ['node-a']);
    await admitOnNodes(registry, request('c2'), ['node-b']);
    const third = await admitOnNodes(registry, request('c3'), ['node-a', 'node-b']);
    expect(third).toMatchObject({
      node: null,
      admitted: { kind: 'refused', reason: 'host_full', node: 'node-b' },
    });
    expect(await registry.reservationForClaim('c3')).toBeNull();
    expect((await registry.held()).map((r) => r.claimId).sort()).toEqual(['c1', 'c2']);
  });

  it('a port held on one node sends the pair to another node; no node at all is host_full', async () => {
    await registry.setLimits({ maxReservations: 5, gpuMib: null });
    await admitOnNodes(registry, request('c1', [18080]), ['node-a']);
    const moved = await admitOnNodes(registry, request('c2', [18080]), ['node-a', 'node-b']);
    expect(moved.node).toBe('node-b');
    const none = await admitOnNodes(registry, request('c3'), []);
    expect(none).toMatchObject({ node: null, admitted: { kind: 'refused', reason: 'host_full' } });
  });

  it("without nodes (the local executor): the registry's own node", async () => {
    const local = await admitOnNodes(registry, request('c1'), null);
    expect(local.node).toBeNull();
    expect((await registry.reservationForClaim('c1'))?.node).toBe(registry.localNode);
  });
});

describe('placement constraints against a node (nodeMatches)', () => {
  const node: RawNode = {
    ID: 'abc123',
    Spec: { Availability: 'active', Role: 'worker', Labels: { gpu: 'h200' } },
    Status: { State: 'ready' },
    Description: {
      Hostname: 'gpu-1',
      Platform: { OS: 'linux', Architecture: 'x86_64' },
      Engine: { Labels: { zone: 'a' } },
    },
  };
  it.each([
    [['node.hostname==gpu-1'], true],
    [['node.hostname==GPU-1'], true],
    [['node.hostname!=gpu-1'], false],
    [['node.hostname==gpu-2'], false],
    [['node.id==abc123', 'node.role==worker'], true],
    [['node.role==manager'], false],
    [['node.platform.os==linux', 'node.platform.arch==x86_64'], true],
    [['node.labels.gpu==h200'], true],
    [['node.labels.gpu==a100'], false],
    [['node.labels.missing==x'], false],
    [['node.labels.missing!=x'], true],
    [['engine.labels.zone==a'], true],
    [['engine.labels.zone != a'], false],
    [[], true],
  ])('%j → %s', (constraints, expected) => {
    expect(nodeMatches(node, constraints)).toBe(expected);
  });
});
