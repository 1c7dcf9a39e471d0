import { isSameProcessAliveSync } from '../../../src/adapters/host-identity.js';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../../src/adapters/registry/sqlite-capacity-registry.js';
import { admissionNodesFor, admitOnNodes, admitOnePair } from '../../../src/app/admission.js';
import { cappedGpuMib } from '../../../src/core/admission-rule.js';
import { checkRegistryNeeds, registryNeeds } from '../../../src/app/batch/registry-needs.js';
import type { NodeInventory } from '../../../src/app/ports/executor-inventory.js';
import { runPair } from '../../../src/app/pair/run-pair.js';
import { fakeRuntime, runPairDeps } from '../../support/fakes.js';
import { manifestOf } from '../../support/manifest.js';
import { clockAt } from '../../support/fake-time.js';

/**
 * Admission, one rule for batches, `pair run` and serve (issue 13): per node on a swarm, pinned to the node it was
 * admitted on; a GPU figure above every budget never waits for ever; a port held by a dead batch never blocks start.
 */
let tmp: string;
let registry: SqliteCapacityRegistry;

/** A swarm's node inventory as the admission sees it: the ready nodes matching the constraints (a hand-written fake). */
function swarm(nodes: readonly string[], seen: (readonly string[])[] = []): NodeInventory {
  return {
    readyNodes: (constraints: readonly string[] = []) => {
      seen.push(constraints);
      return Promise.resolve(nodes.filter((n) => constraints.every((c) => c !== `node.hostname!=${n}`)));
    },
  };
}
/** The local engine: no node inventory. */
const local = undefined;

const job = (id: string, extra: { gpu_mib?: number; placement?: string[] } = {}) => ({
  job_id: id,
  ...extra,
});
const request = (claimId: string) => ({ batchId: 'pair-run-x', claimId, ports: [] });

beforeEach(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'rg-admission-'));
  registry = SqliteCapacityRegistry.open({ path: join(tmp, 'registry.db'), localNode: 'this-host' });
});
afterEach(async () => {
  await registry.close();
  await rm(tmp, { recursive: true, force: true });
});

describe('pair run and serve pairs on a swarm: admitted per node, pinned there', () => {
  it('reserves on a ready node with room and pins the job to it; the next pair goes to the other node', async () => {
    await registry.setLimits({ maxReservations: 1, gpuMib: null });
    const runtime = swarm(['node-a', 'node-b']);
    const first = await admitOnePair(
      registry,
      runtime,
      request('c1'),
      job('p1', { placement: ['node.labels.gpu==h200'] }),
      'spec.json',
    );
    expect(first.node).toBe('node-a');
    expect(first.job.placement).toEqual(['node.labels.gpu==h200', 'node.hostname==node-a']);
    expect((await registry.reservationForClaim('c1'))?.node).toBe('node-a');
    const second = await admitOnePair(registry, runtime, request('c2'), job('p2'), 'spec.json');
    expect(second.node).toBe('node-b');
    expect(second.job.placement).toEqual(['node.hostname==node-b']);
    const third = await admitOnePair(registry, runtime, request('c3'), job('p3'), 'spec.json');
    expect(third.admitted).toMatchObject({ kind: 'refused', reason: 'host_full' });
    expect(await registry.reservationForClaim('c3')).toBeNull();
  });

  it("passes the job's placement to the node listing (nodes that do not match are never tried)", async () => {
    const seen: (readonly string[])[] = [];
    const pinned = await admitOnePair(
      registry,
      swarm(['node-a', 'node-b'], seen),
      request('c1'),
      job('p1', { placement: ['node.hostname!=node-a'] }),
      's',
    );
    expect(seen).toEqual([['node.hostname!=node-a']]);
    expect(pinned.node).toBe('node-b');
  });

  it("the local executor: the registry's own node, the job unchanged", async () => {
    const spec = job('p1');
    const admitted = await admitOnePair(registry, local, request('c1'), spec, 's');
    expect(admitted.node).toBeNull();
    expect(admitted.job).toBe(spec);
    expect((await registry.reservationForClaim('c1'))?.node).toBe('this-host');
  });

  it('reserves the declared gpu_mib (with or without gpus), as a batch pair does before its first peak', async () => {
    await admitOnePair(registry, local, request('c1'), job('p1', { gpu_mib: 700 }), 's');
    expect((await registry.reservationForClaim('c1'))?.gpuMib).toBe(700);
  });

  it('a swarm whose manager cannot list its nodes: the error, nothing reserved', async () => {
    const broken: NodeInventory = { readyNodes: () => Promise.reject(new Error('manager unreachable')) };
    await expect(admitOnePair(registry, broken, request('c1'), job('p1'), 's')).rejects.toThrow(
      'manager unreachable',
    );
    expect(await registry.held()).toEqual([]);
  });

  it('admissionNodesFor: undefined without a node inventory; nodes declared down are left out; the start rotates', async () => {
    expect(admissionNodesFor(local)).toBeUndefined();
    const nodes = admissionNodesFor(swarm(['a', 'b', 'c']), () => Promise.resolve(['b']))!;
    expect(await nodes([])).toEqual(['a', 'c']);
    expect(await nodes([])).toEqual(['c', 'a']);
  });
});

describe('a GPU figure no node can ever hold', () => {
  it("a measured peak above the node's whole budget is reserved at that budget: the pair runs alone there instead of waiting for ever", async () => {
    await registry.setLimits({ maxReservations: 4, gpuMib: 1_000 });
    const big = await admitOnNodes(registry, { batchId: 'b', jobId: 'j1', claimId: 'c1', gpuMib: 1_500 }, [
      'node-a',
    ]);
    expect(big).toMatchObject({ node: 'node-a', admitted: { kind: 'admitted' } });
    expect((await registry.reservationForClaim('c1'))?.gpuMib).toBe(1_000);
    // Alone: any other GPU pair on that node waits; a GPU-less one does not.
    const other = await admitOnNodes(registry, { batchId: 'b', jobId: 'j2', claimId: 'c2', gpuMib: 10 }, [
      'node-a',
    ]);
    expect(other.admitted).toMatchObject({ kind: 'refused', reason: 'gpu_budget' });
    const cpu = await admitOnNodes(registry, { batchId: 'b', jobId: 'j3', claimId: 'c3', gpuMib: 0 }, [
      'node-a',
    ]);
    expect(cpu.admitted).toMatchObject({ kind: 'admitted' });
  });

  it('cappedGpuMib: never above a budget, unchanged without one', () => {
    expect(cappedGpuMib(1_500, { maxReservations: 2, gpuMib: 1_000 })).toBe(1_000);
    expect(cappedGpuMib(900, { maxReservations: 2, gpuMib: 1_000 })).toBe(900);
    expect(cappedGpuMib(1_500, { maxReservations: 2, gpuMib: null })).toBe(1_500);
  });

  it('each node caps at its own budget (the local node too)', async () => {
    await registry.setLimits({ maxReservations: 4, gpuMib: 2_000 }, 'node-b');
    await registry.setLimits({ maxReservations: 4, gpuMib: 500 });
    await admitOnNodes(registry, { batchId: 'b', jobId: 'j1', claimId: 'c1', gpuMib: 3_000 }, ['node-b']);
    await admitOnNodes(registry, { batchId: 'b', jobId: 'j2', claimId: 'c2', gpuMib: 3_000 }, null);
    expect((await registry.reservationForClaim('c1'))?.gpuMib).toBe(2_000);
    expect((await registry.reservationForClaim('c2'))?.gpuMib).toBe(500);
  });

  it("pair run: a declared gpu_mib above every ready node's whole budget is refused (exit 2, the field and the figures), nothing written or held", async () => {
    await registry.setLimits({ maxReservations: 4, gpuMib: 1_000 }, 'node-a');
    await registry.setLimits({ maxReservations: 4, gpuMib: 800 }, 'node-b');
    const runtime = fakeRuntime({ imageExists: () => Promise.resolve(true) });
    const deps = runPairDeps({
      fs: new NodeFileSystem(),
      runtime,
      nodes: swarm(['node-a', 'node-b']),
      clock: clockAt(() => new Date()),
      registry,
    });
    const spec = {
      job_id: 'big',
      image: 'img:1',
      argv: ['/x'],
      cwd: join(tmp, 'w'),
      outcome_path: join(tmp, 'o', 'big.json'),
      gpus: 1,
      gpu_mib: 1_200,
    };
    const before = (await readdir(tmp)).sort();
    const error = await runPair(deps, {
      specText: JSON.stringify(spec),
      specSource: 'spec.json',
      output: join(tmp, 'run'),
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 't',
      cwd: tmp,
    }).catch((err: unknown) => err);
    expect(error).toMatchObject({ code: 'E_SPEC_INVALID', exitCode: 2, issues: [{ path: 'gpu_mib' }] });
    const rule = (error as { issues: { rule: string }[] }).issues[0]!.rule;
    expect(rule).toContain(
      '1200 MiB exceeds the whole GPU budget of every node it may run on (node-a: 1000 MiB, node-b: 800 MiB)',
    );
    expect(rule).toContain('job big could never be admitted');
    expect((await readdir(tmp)).sort()).toEqual(before);
    expect(await registry.held()).toEqual([]);
  });

  it('start on a swarm: refused when no node can hold the declared figure; a node without a budget holds any', async () => {
    await registry.setLimits({ maxReservations: 4, gpuMib: 1_000 });
    const manifest = manifestOf([
      { job_id: 'a', gpus: 1, gpu_mib: 1_500 },
      { job_id: 'b', gpus: 1, gpu_mib: 900 },
    ]);
    const nodes = admissionNodesFor(swarm(['node-a', 'node-b']))!;
    await expect(checkRegistryNeeds(registry, registryNeeds(manifest, { nodes }))).rejects.toMatchObject({
      exitCode: 2,
      issues: [
        { path: 'jobs[0].gpu_mib', rule: expect.stringContaining('job a could never be admitted') as string },
      ],
    });
    await registry.setLimits({ maxReservations: 4, gpuMib: null }, 'node-b');
    await expect(checkRegistryNeeds(registry, registryNeeds(manifest, { nodes }))).resolves.toBeUndefined();
  });
});

describe("start and a port held by another batch: refused only while that batch's supervisor is alive", () => {
  const manifest = manifestOf([{ job_id: 'new1', ports: [18_080] }]);
  const holderLease = { pid: 4242, start_ticks: '99', boot_id: 'boot' };

  async function holdPort(node?: string): Promise<void> {
    const admitted = await registry.admit({
      batchId: 'e1-old',
      jobId: 'old1',
      claimId: `c-${node ?? 'local'}`,
      gpuMib: 0,
      ports: [18_080],
      ...(node ? { node } : {}),
    });
    expect(admitted.kind).toBe('admitted');
  }

  it('a live holder: exit 2 naming the port, the node, the holder batch and its supervisor', async () => {
    await holdPort();
    await registry.acquireLease('e1-old', holderLease, () => true);
    const alive = (): boolean => true;
    const { heldPortIssues } = await import('../../../src/app/admission.js');
    const checked = await heldPortIssues(registry, registryNeeds(manifest).ports, undefined, alive);
    expect(checked.issues).toEqual([
      {
        path: 'jobs[0].ports[0]',
        rule: 'port 18080 is held on node this-host by batch e1-old (job old1), whose supervisor (pid 4242) is alive, which is still running: wait for it to finish, or choose another port',
      },
    ]);
    expect(checked.warnings).toEqual([]);
  });

  it('a holder whose supervisor was SIGKILLed (its lease stale) or exited: the batch starts, with a warning saying how to finish the holder', async () => {
    await holdPort();
    await registry.acquireLease(
      'e1-old',
      { pid: 2 ** 22 + 7, start_ticks: '1', boot_id: 'no-such-boot' },
      () => true,
    ); // a dead process
    const warnings: string[] = [];
    await expect(
      checkRegistryNeeds(
        registry,
        registryNeeds(manifest, { warn: (w) => warnings.push(w), isAlive: isSameProcessAliveSync }),
      ),
    ).resolves.toBeUndefined();
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(
      'port 18080 is held on node this-host by batch e1-old (job old1), whose supervisor is not running',
    );
    expect(warnings[0]).toContain('e1-batch resume --output DIR');
    expect(warnings[0]).toContain('reconcile --output DIR --execute');
    // No lease at all (the supervisor exited and kept the pair's slot): the same.
    await registry.releaseLease('e1-old', 2 ** 22 + 7);
    const again: string[] = [];
    await checkRegistryNeeds(
      registry,
      registryNeeds(manifest, { warn: (w) => again.push(w), isAlive: isSameProcessAliveSync }),
    );
    expect(again).toHaveLength(1);
  });

  it('a swarm: a port held on one node only leaves the other node; held by live holders on every node is refused', async () => {
    const { heldPortIssues } = await import('../../../src/app/admission.js');
    await registry.acquireLease('e1-old', holderLease, () => true);
    const nodes = admissionNodesFor(swarm(['node-a', 'node-b']))!;
    await holdPort('node-a');
    expect(await heldPortIssues(registry, registryNeeds(manifest).ports, nodes, () => true)).toEqual({
      issues: [],
      warnings: [],
    });
    await holdPort('node-b');
    const both = await heldPortIssues(registry, registryNeeds(manifest).ports, nodes, () => true);
    expect(both.issues).toHaveLength(1);
    expect(both.issues[0]!.rule).toMatch(
      /on node node-[ab] by batch e1-old .*; on node node-[ab] by batch e1-old/,
    );
  });
});
