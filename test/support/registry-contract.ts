/**
 * The capacity registry's contract (SPEC §7, §8 steps 2-4), one suite run against every backend: SQLite
 * (test/unit/registry-contract.sqlite.test.ts) and PostgreSQL (test/integration/registry-contract.postgres.int.test.ts).
 * A backend gives a fresh, empty store per test, opens any number of registries (connections) on it, and runs
 * raw SQL on it for states the API cannot produce.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type {
  AdmitRequest,
  CapacityRegistry,
  TerminalCommit,
} from '../../src/app/ports/capacity-registry.js';
import { InvalidInputError, RoboguideError } from '../../src/core/errors.js';

export interface RegistryBackend {
  readonly name: string;
  /** A fresh, empty store for the next test. */
  fresh(): Promise<void>;
  open(options: {
    clock?: { now(): Date };
    newId?: () => string;
    localNode: string;
  }): Promise<CapacityRegistry>;
  /** Raw SQL on the store, `?` placeholders. */
  rawSql(sql: string, ...params: string[]): Promise<void>;
  /** The schema version this tool writes. */
  readonly schemaVersion: number;
  /** How many concurrent admitters run in the "no lost update" test (connections; processes are in the multi-process tests). */
  readonly concurrentAdmitters: number;
}

export const NODE = 'node-a';

export function registryContract(backend: RegistryBackend): void {
  let opened: CapacityRegistry[];
  let tick: number;
  let nextId: number;
  const clock = { now: () => new Date(Date.UTC(2025, 0, 1, 0, 0, tick++)) };
  const newId = (): string => `res-${nextId++}`;

  async function openRegistry(localNode = NODE): Promise<CapacityRegistry> {
    const registry = await backend.open({ clock, newId, localNode });
    opened.push(registry);
    return registry;
  }

  function request(claimId: string, overrides: Partial<AdmitRequest> = {}): AdmitRequest {
    return { batchId: 'batch-a', jobId: `job-${claimId}`, claimId, gpuMib: 0, ...overrides };
  }

  function terminal(
    claimId: string,
    reservationId: string,
    overrides: Partial<TerminalCommit> = {},
  ): TerminalCommit {
    return {
      batchId: 'batch-a',
      jobId: `job-${claimId}`,
      claimId,
      reservationId,
      classification: 'completed',
      outcomeSha256: 'o'.repeat(64),
      proofSha256: 'p'.repeat(64),
      ...overrides,
    };
  }

  async function admitted(
    registry: CapacityRegistry,
    claimId: string,
    overrides: Partial<AdmitRequest> = {},
  ): Promise<string> {
    const result = await registry.admit(request(claimId, overrides));
    if (result.kind !== 'admitted') throw new Error(`expected admission, got ${JSON.stringify(result)}`);
    return result.reservationId;
  }

  describe(`capacity registry contract (${backend.name})`, () => {
    beforeEach(async () => {
      opened = [];
      tick = 0;
      nextId = 1;
      await backend.fresh();
    });

    afterEach(async () => {
      for (const registry of opened) await registry.close();
    });

    describe('opening', () => {
      it("reopening keeps the data; the schema is at this tool's version", async () => {
        const registry = await openRegistry();
        await registry.setLimits({ maxReservations: 3, gpuMib: 8_000 });
        const reservationId = await admitted(registry, 'c1', { gpuMib: 1_000 });
        await registry.close();
        const reopened = await openRegistry();
        expect(await reopened.limits()).toEqual({ maxReservations: 3, gpuMib: 8_000 });
        expect(await reopened.reservationForClaim('c1')).toMatchObject({
          id: reservationId,
          state: 'held',
          gpuMib: 1_000,
          node: NODE,
        });
        expect(await reopened.board()).toHaveLength(1);
        expect(await reopened.schemaVersion()).toEqual({
          current: backend.schemaVersion,
          supported: backend.schemaVersion,
        });
      });

      it('starts with the default limits: 2 reservations, no GPU limit', async () => {
        expect(await (await openRegistry()).limits()).toEqual({ maxReservations: 2, gpuMib: null });
      });

      it('refuses a database written by a newer schema', async () => {
        await (await openRegistry()).close();
        await backend.rawSql('INSERT INTO schema_version (version) VALUES (99)');
        await expect(openRegistry()).rejects.toMatchObject({ code: 'E_REGISTRY' });
      });

      it('migrates once when several openers start on an empty store at once', async () => {
        const registries = await Promise.all(Array.from({ length: 4 }, () => openRegistry()));
        for (const registry of registries) {
          expect(await registry.schemaVersion()).toEqual({
            current: backend.schemaVersion,
            supported: backend.schemaVersion,
          });
        }
        expect(await registries[0]!.limits()).toEqual({ maxReservations: 2, gpuMib: null });
      });
    });

    describe('admission', () => {
      it('admits within the host limit and writes a running board row', async () => {
        const registry = await openRegistry();
        const first = await admitted(registry, 'c1');
        const second = await admitted(registry, 'c2', { batchId: 'batch-b' });
        expect((await registry.held()).map((r) => r.id)).toEqual([first, second]);
        expect((await registry.held({ batchId: 'batch-b' })).map((r) => r.id)).toEqual([second]);
        expect(await registry.reservation(first)).toEqual({
          id: first,
          batchId: 'batch-a',
          jobId: 'job-c1',
          claimId: 'c1',
          containerId: null,
          gpuMib: 0,
          node: NODE,
          ports: [],
          state: 'held',
          createdAt: '2025-01-01T00:00:00.000Z',
          releasedAt: null,
          proofSha256: null,
        });
        expect(await registry.board({ claimId: 'c1' })).toEqual([
          {
            batchId: 'batch-a',
            jobId: 'job-c1',
            claimId: 'c1',
            state: 'running',
            classification: null,
            outcomeSha256: null,
            proofSha256: null,
            updatedAt: '2025-01-01T00:00:00.000Z',
            score: null,
            notes: null,
          },
        ]);
      });

      it('refuses at the limit across batches and inserts nothing', async () => {
        const registry = await openRegistry();
        await admitted(registry, 'c1');
        await admitted(registry, 'c2', { batchId: 'batch-b' });
        expect(await registry.admit(request('c3'))).toEqual({
          kind: 'refused',
          reason: 'host_full',
          held: 2,
          limit: 2,
          node: NODE,
        });
        expect(await registry.reservationForClaim('c3')).toBeNull();
        expect(await registry.board({ claimId: 'c3' })).toEqual([]);
        expect(await registry.held()).toHaveLength(2);
      });

      it('enforces the GPU budget over held reservations only', async () => {
        const registry = await openRegistry();
        await registry.setLimits({ maxReservations: 5, gpuMib: 10_000 });
        const big = await admitted(registry, 'c1', { gpuMib: 6_000 });
        expect(await registry.admit(request('c2', { gpuMib: 5_000 }))).toEqual({
          kind: 'refused',
          reason: 'gpu_budget',
          held: 6_000,
          limit: 10_000,
          node: NODE,
        });
        await admitted(registry, 'c3', { gpuMib: 4_000 });
        await admitted(registry, 'c4', { gpuMib: 0 });
        expect(await registry.release(big, 'c1')).toEqual({ kind: 'released' });
        await admitted(registry, 'c2', { gpuMib: 5_000 });
      });

      it('is idempotent per claim and rejects a claim reused by another run', async () => {
        const registry = await openRegistry();
        const id = await admitted(registry, 'c1');
        expect(await registry.admit(request('c1'))).toEqual({ kind: 'already_admitted', reservationId: id });
        expect(await registry.held()).toHaveLength(1);
        await expect(registry.admit(request('c1', { batchId: 'batch-b' }))).rejects.toThrow(RoboguideError);
        expect(await registry.held()).toHaveLength(1);
      });

      it('rejects invalid requests and limits as invalid input, naming the field', async () => {
        const registry = await openRegistry();
        await expect(registry.admit(request('c1', { gpuMib: -1 }))).rejects.toThrow(InvalidInputError);
        await expect(registry.admit(request(''))).rejects.toThrow(InvalidInputError);
        await expect(registry.admit(request('c1', { ports: [0] }))).rejects.toMatchObject({
          issues: [{ path: 'ports[0]' }],
        });
        await expect(registry.admit(request('c1', { node: '' }))).rejects.toMatchObject({
          issues: [{ path: 'node' }],
        });
        await expect(registry.setLimits({ maxReservations: 0, gpuMib: null })).rejects.toThrow(
          InvalidInputError,
        );
        await expect(registry.setLimits({ maxReservations: 2, gpuMib: 1.5 })).rejects.toThrow(
          InvalidInputError,
        );
        await expect(registry.setLimits({ maxReservations: 2, gpuMib: null }, 'bad\nnode')).rejects.toThrow(
          InvalidInputError,
        );
        expect(await registry.limits()).toEqual({ maxReservations: 2, gpuMib: null });
        expect(await registry.held()).toEqual([]);
      });
    });

    describe('nodes', () => {
      it('keeps limits and reservations per node; a node without its own limits uses the default', async () => {
        const registry = await openRegistry();
        await registry.setLimits({ maxReservations: 1, gpuMib: 4_000 }, 'gpu-1');
        expect(await registry.limits('gpu-1')).toEqual({ maxReservations: 1, gpuMib: 4_000 });
        expect(await registry.limits('gpu-2')).toEqual({ maxReservations: 2, gpuMib: null });
        expect(await registry.nodeLimits()).toEqual([
          { node: 'gpu-1', limits: { maxReservations: 1, gpuMib: 4_000 } },
        ]);
        await admitted(registry, 'c1', { node: 'gpu-1', gpuMib: 1_000 });
        expect(await registry.admit(request('c2', { node: 'gpu-1' }))).toEqual({
          kind: 'refused',
          reason: 'host_full',
          held: 1,
          limit: 1,
          node: 'gpu-1',
        });
        // Another node has its own count: the default (2) applies there, and to the local node.
        await admitted(registry, 'c3', { node: 'gpu-2' });
        await admitted(registry, 'c4', { node: 'gpu-2' });
        expect(await registry.admit(request('c5', { node: 'gpu-2' }))).toMatchObject({
          kind: 'refused',
          reason: 'host_full',
          node: 'gpu-2',
        });
        await admitted(registry, 'c6');
        expect((await registry.held()).map((r) => [r.claimId, r.node])).toEqual([
          ['c1', 'gpu-1'],
          ['c3', 'gpu-2'],
          ['c4', 'gpu-2'],
          ['c6', NODE],
        ]);
        expect(registry.localNode).toBe(NODE);
      });

      it('keeps the GPU budget per node', async () => {
        const registry = await openRegistry();
        await registry.setLimits({ maxReservations: 4, gpuMib: 10_000 });
        await admitted(registry, 'c1', { node: 'gpu-1', gpuMib: 8_000 });
        await admitted(registry, 'c2', { node: 'gpu-2', gpuMib: 8_000 });
        expect(await registry.admit(request('c3', { node: 'gpu-1', gpuMib: 4_000 }))).toEqual({
          kind: 'refused',
          reason: 'gpu_budget',
          held: 8_000,
          limit: 10_000,
          node: 'gpu-1',
        });
      });
    });

    describe('published ports', () => {
      it("holds a pair's ports on its node while its slot is held; another batch waits for them", async () => {
        const registry = await openRegistry();
        await registry.setLimits({ maxReservations: 10, gpuMib: null });
        const a = await admitted(registry, 'c1', { batchId: 'batch-a', ports: [40_002, 40_001] });
        expect((await registry.reservation(a))?.ports).toEqual([40_001, 40_002]);
        expect(await registry.admit(request('c2', { batchId: 'batch-b', ports: [40_002, 40_100] }))).toEqual({
          kind: 'refused',
          reason: 'port_held',
          held: 1,
          limit: 1,
          node: NODE,
          port: 40_002,
          holderBatchId: 'batch-a',
        });
        expect(await registry.reservationForClaim('c2')).toBeNull();
        // The same port on another node is free; other ports on this node are free.
        await admitted(registry, 'c3', { batchId: 'batch-b', node: 'gpu-2', ports: [40_002] });
        await admitted(registry, 'c4', { batchId: 'batch-b', ports: [40_100] });
        expect(await registry.portHolders(NODE, [40_001, 40_002, 40_100, 40_200])).toEqual([
          { node: NODE, port: 40_001, batchId: 'batch-a', jobId: 'job-c1', reservationId: a },
          { node: NODE, port: 40_002, batchId: 'batch-a', jobId: 'job-c1', reservationId: a },
          expect.objectContaining({ node: NODE, port: 40_100, batchId: 'batch-b' }),
        ]);
        // Released (by reconciliation or plainly): the port is free again.
        await registry.commitTerminal(terminal('c1', a));
        expect(await registry.portHolders(NODE, [40_001, 40_002])).toEqual([]);
        await admitted(registry, 'c2', { batchId: 'batch-b', ports: [40_002] });
      });
    });

    describe('writable mount sources', () => {
      it('lists the folders a reservation records, its evidence folder marked by a trailing slash', async () => {
        const registry = await openRegistry();
        const id = await admitted(registry, 'c1', {
          writableMounts: ['/w/b', '/w/a/'],
          evidenceFolder: '/e/jobs/j1',
        });
        expect(await registry.reservationSources(id)).toEqual(['/e/jobs/j1/', '/w/a', '/w/b']);
        expect(await registry.reservationSources('no-such-reservation')).toEqual([]);
      });

      it('refuses a writable source inside, or holding, another held one across batches; equal ones and other nodes pass; freed with the slot', async () => {
        const registry = await openRegistry();
        await registry.setLimits({ maxReservations: 10, gpuMib: null });
        const a = await admitted(registry, 'c1', { batchId: 'batch-a', writableMounts: ['/w/ws'] });
        for (const [claim, source] of [
          ['c2', '/w/ws/sub'],
          ['c3', '/w'],
        ] as const) {
          expect(
            await registry.admit(request(claim, { batchId: 'batch-b', writableMounts: [source] })),
          ).toEqual({
            kind: 'refused',
            reason: 'mount_nested',
            held: 1,
            limit: 1,
            node: NODE,
            source,
            heldSource: '/w/ws',
            holderBatchId: 'batch-a',
          });
          expect(await registry.reservationForClaim(claim)).toBeNull();
        }
        // The same folder (as the spec allows), a sibling with a common prefix, and another node pass.
        await admitted(registry, 'c4', { batchId: 'batch-b', writableMounts: ['/w/ws/'] });
        await admitted(registry, 'c5', { batchId: 'batch-b', writableMounts: ['/w/ws2'] });
        await admitted(registry, 'c6', { batchId: 'batch-b', node: 'gpu-2', writableMounts: ['/w/ws/sub'] });
        await expect(registry.admit(request('c7', { writableMounts: ['rel'] }))).rejects.toThrow(
          /writableMounts/,
        );
        // Released (by reconciliation or plainly): the source no longer counts.
        await registry.commitTerminal(terminal('c1', a));
        await registry.release((await registry.reservationForClaim('c4'))?.id ?? '', 'c4');
        await admitted(registry, 'c8', { batchId: 'batch-c', writableMounts: ['/w/ws/sub'] });
      });
    });

    describe('containers and release', () => {
      it('attaches a container once, idempotently', async () => {
        const registry = await openRegistry();
        const id = await admitted(registry, 'c1');
        await registry.attachContainer(id, 'ctr-1');
        await registry.attachContainer(id, 'ctr-1');
        expect((await registry.reservation(id))?.containerId).toBe('ctr-1');
        await expect(registry.attachContainer(id, 'ctr-2')).rejects.toThrow(RoboguideError);
        await expect(registry.attachContainer('nope', 'ctr-1')).rejects.toThrow(RoboguideError);
        await registry.release(id, 'c1');
        await expect(registry.attachContainer(id, 'ctr-1')).rejects.toThrow(RoboguideError);
      });

      it('refuses a release by another claim or of an unknown reservation, keeping it held', async () => {
        const registry = await openRegistry();
        const id = await admitted(registry, 'c1');
        expect(await registry.release(id, 'c2')).toEqual({ kind: 'refused', reason: 'not_held_by_claim' });
        expect(await registry.release('nope', 'c1')).toEqual({
          kind: 'refused',
          reason: 'unknown_reservation',
        });
        expect((await registry.reservation(id))?.state).toBe('held');
      });

      it('releases once; a second release reports already_released and changes nothing', async () => {
        const registry = await openRegistry();
        const id = await admitted(registry, 'c1');
        expect(await registry.release(id, 'c1')).toEqual({ kind: 'released' });
        const after = await registry.reservation(id);
        expect(after).toMatchObject({ state: 'released', releasedAt: '2025-01-01T00:00:01.000Z' });
        expect(await registry.release(id, 'c1')).toEqual({ kind: 'already_released' });
        expect(await registry.reservation(id)).toEqual(after);
        expect(await registry.held()).toEqual([]);
      });
    });

    describe('commitTerminal', () => {
      it('writes the board row terminal and releases the reservation, with read-backs', async () => {
        const registry = await openRegistry();
        const id = await admitted(registry, 'c1');
        expect(
          await registry.commitTerminal(terminal('c1', id, { classification: 'fatal', outcomeSha256: null })),
        ).toEqual({
          kind: 'committed',
          steps: [
            'board_written_terminal',
            'board_read_back',
            'reservation_released',
            'reservation_read_back',
          ],
        });
        expect((await registry.board({ claimId: 'c1' }))[0]).toMatchObject({
          state: 'terminal',
          classification: 'fatal',
          outcomeSha256: null,
          proofSha256: 'p'.repeat(64),
          updatedAt: '2025-01-01T00:00:01.000Z',
        });
        expect(await registry.reservation(id)).toMatchObject({
          state: 'released',
          proofSha256: 'p'.repeat(64),
        });
      });

      it('replays as a no-op that preserves later fields', async () => {
        const registry = await openRegistry();
        const id = await admitted(registry, 'c1');
        await registry.commitTerminal(terminal('c1', id));
        await registry.annotate('c1', { score: '0.75' });
        await registry.annotate('c1', { notes: 'checked by hand' });
        const board = await registry.board({ claimId: 'c1' });
        const reservation = await registry.reservation(id);
        expect(board[0]).toMatchObject({ score: '0.75', notes: 'checked by hand' });
        expect(await registry.commitTerminal(terminal('c1', id))).toEqual({
          kind: 'already_committed',
          steps: ['board_already_terminal', 'reservation_already_released'],
        });
        expect(await registry.board({ claimId: 'c1' })).toEqual(board);
        expect(await registry.reservation(id)).toEqual(reservation);
        expect(await registry.release(id, 'c1')).toEqual({ kind: 'already_released' });
      });

      it('refuses a proof that differs from the terminal one and changes nothing', async () => {
        const registry = await openRegistry();
        const id = await admitted(registry, 'c1');
        await registry.commitTerminal(terminal('c1', id));
        const board = await registry.board();
        expect(
          await registry.commitTerminal(
            terminal('c1', id, { proofSha256: 'q'.repeat(64), classification: 'fatal' }),
          ),
        ).toMatchObject({
          kind: 'refused',
          reason: 'proof_mismatch',
        });
        expect(await registry.board()).toEqual(board);
      });

      it('keeps the reservation held on every refusal', async () => {
        const registry = await openRegistry();
        const id = await admitted(registry, 'c1');
        const other = await admitted(registry, 'c2');
        const refusals = [
          [terminal('c1', 'nope'), 'unknown_reservation'],
          [terminal('c1', id, { batchId: 'batch-b' }), 'run_owned_by_other_batch'],
          [terminal('c2', id), 'reservation_not_held_by_claim'],
          [terminal('c1', id, { jobId: 'job-other' }), 'reservation_not_held_by_claim'],
        ] as const;
        for (const [commit, reason] of refusals) {
          expect(await registry.commitTerminal(commit)).toMatchObject({ kind: 'refused', reason });
        }
        expect((await registry.held()).map((r) => r.id)).toEqual([id, other]);
        expect((await registry.board()).map((row) => row.state)).toEqual(['running', 'running']);
      });

      it('refuses a reservation released outside reconciliation', async () => {
        const registry = await openRegistry();
        const id = await admitted(registry, 'c1');
        await registry.release(id, 'c1');
        expect(await registry.commitTerminal(terminal('c1', id))).toMatchObject({
          kind: 'refused',
          reason: 'reservation_not_held_by_claim',
        });
        expect((await registry.board({ claimId: 'c1' }))[0]?.state).toBe('running');
      });

      it('completes the release when the board is already terminal with the same proof', async () => {
        const registry = await openRegistry();
        const id = await admitted(registry, 'c1');
        await backend.rawSql(
          `UPDATE board SET state = 'terminal', classification = 'completed', proof_sha256 = ? WHERE run_id = 'c1'`,
          'p'.repeat(64),
        );
        expect(
          await registry.commitTerminal(terminal('c1', id, { proofSha256: 'q'.repeat(64) })),
        ).toMatchObject({ kind: 'refused', reason: 'proof_mismatch' });
        expect((await registry.reservation(id))?.state).toBe('held');
        expect(await registry.commitTerminal(terminal('c1', id))).toEqual({
          kind: 'committed',
          steps: ['board_already_terminal', 'reservation_released', 'reservation_read_back'],
        });
        expect(await registry.held()).toEqual([]);
      });

      it('refuses a run id that another batch already has on the board', async () => {
        const registry = await openRegistry();
        const id = await admitted(registry, 'c1');
        await backend.rawSql(`UPDATE board SET batch_id = 'batch-z' WHERE run_id = 'c1'`);
        expect(await registry.commitTerminal(terminal('c1', id))).toMatchObject({
          kind: 'refused',
          reason: 'run_owned_by_other_batch',
        });
        expect((await registry.reservation(id))?.state).toBe('held');
      });
    });

    describe('board', () => {
      it('filters by batch and run, and refuses to annotate an unknown run', async () => {
        const registry = await openRegistry();
        await admitted(registry, 'c1');
        await admitted(registry, 'c2', { batchId: 'batch-b' });
        expect((await registry.board({ batchId: 'batch-b' })).map((row) => row.claimId)).toEqual(['c2']);
        expect(await registry.board({ batchId: 'batch-a', claimId: 'c2' })).toEqual([]);
        await expect(registry.annotate('nope', { score: '1' })).rejects.toThrow(RoboguideError);
      });
    });

    describe('supervisor lease', () => {
      it('grants one live supervisor per batch, hands over from a dead one, and is released by its holder only', async () => {
        const a = await openRegistry();
        const b = await openRegistry();
        const first = { pid: 100, start_ticks: '1', boot_id: 'boot' };
        const second = { pid: 200, start_ticks: '2', boot_id: 'boot' };
        let firstAlive = true;
        const alive = (h: { pid: number }): boolean => (h.pid === 100 ? firstAlive : true);
        expect(await a.acquireLease('batch-1', first, alive)).toEqual({ kind: 'acquired' });
        expect(await b.acquireLease('batch-1', second, alive)).toEqual({ kind: 'held', holder: first });
        expect(await b.acquireLease('batch-2', second, alive)).toEqual({ kind: 'acquired' });
        expect(await a.acquireLease('batch-1', first, alive)).toEqual({ kind: 'acquired' });
        await b.releaseLease('batch-1', 200);
        expect(await b.acquireLease('batch-1', second, alive)).toMatchObject({ kind: 'held' });
        firstAlive = false;
        expect(await b.acquireLease('batch-1', second, alive)).toEqual({ kind: 'acquired' });
        await b.releaseLease('batch-1', 200);
        firstAlive = true;
        expect(await a.acquireLease('batch-1', first, alive)).toEqual({ kind: 'acquired' });
      });

      it("reads a batch's recorded holder back (null when none is recorded or it gave the lease back)", async () => {
        const a = await openRegistry();
        const b = await openRegistry();
        const holder = { pid: 300, start_ticks: '30', boot_id: 'boot' };
        expect(await b.supervisorLease('batch-3')).toBeNull();
        await a.acquireLease('batch-3', holder, () => true);
        expect(await b.supervisorLease('batch-3')).toEqual(holder);
        expect(await b.supervisorLease('batch-4')).toBeNull();
        await a.releaseLease('batch-3', 300);
        expect(await b.supervisorLease('batch-3')).toBeNull();
      });

      it('grants a contested lease to exactly one of several concurrent supervisors', async () => {
        const registries = await Promise.all(Array.from({ length: 6 }, () => openRegistry()));
        const results = await Promise.all(
          registries.map((r, i) =>
            r.acquireLease('batch-x', { pid: 1000 + i, start_ticks: String(i), boot_id: 'boot' }, () => true),
          ),
        );
        expect(results.filter((r) => r.kind === 'acquired')).toHaveLength(1);
      });
    });

    describe('several connections', () => {
      it(`admits exactly the limit when ${backend.concurrentAdmitters} connections ask at once (no lost update)`, async () => {
        const setup = await openRegistry();
        await setup.setLimits({ maxReservations: 7, gpuMib: null });
        const registries = await Promise.all(
          Array.from({ length: backend.concurrentAdmitters }, () => openRegistry()),
        );
        const results = await Promise.all(
          registries.map((registry, index) =>
            registry.admit(request(`c${index}`, { batchId: `batch-${index}` })),
          ),
        );
        expect(results.filter((r) => r.kind === 'admitted')).toHaveLength(7);
        expect(results.filter((r) => r.kind === 'refused' && r.reason === 'host_full')).toHaveLength(
          backend.concurrentAdmitters - 7,
        );
        expect(await setup.held()).toHaveLength(7);
      });

      it('admits at most one of several pairs that want the same port at once', async () => {
        const setup = await openRegistry();
        await setup.setLimits({ maxReservations: 100, gpuMib: null });
        const registries = await Promise.all(Array.from({ length: 8 }, () => openRegistry()));
        const results = await Promise.all(
          registries.map((registry, index) =>
            registry.admit(request(`c${index}`, { batchId: `batch-${index}`, ports: [45_000] })),
          ),
        );
        expect(results.filter((r) => r.kind === 'admitted')).toHaveLength(1);
        expect(results.filter((r) => r.kind === 'refused' && r.reason === 'port_held')).toHaveLength(7);
      });

      it('sees a release made through another connection', async () => {
        const [first, second, third] = await Promise.all([openRegistry(), openRegistry(), openRegistry()]);
        const one = await first.admit(request('c1'));
        await second.admit(request('c2'));
        expect(await third.admit(request('c3'))).toMatchObject({ kind: 'refused', reason: 'host_full' });
        if (one.kind !== 'admitted') throw new Error('expected admission');
        expect(await second.release(one.reservationId, 'c1')).toEqual({ kind: 'released' });
        expect(await third.admit(request('c3'))).toMatchObject({ kind: 'admitted' });
        expect(await first.release(one.reservationId, 'c1')).toEqual({ kind: 'already_released' });
      });

      it('keeps the limits over a long random interleaving of admits and releases', async () => {
        const registries = await Promise.all(Array.from({ length: 4 }, () => openRegistry()));
        await registries[0]!.setLimits({ maxReservations: 3, gpuMib: 20_000 });
        const random = seeded(20_250_101);
        const model = new Map<string, { reservationId: string; gpuMib: number }>();
        let claimCounter = 0;
        let refusals = 0;
        for (let step = 0; step < 120; step += 1) {
          const registry = registries[Math.floor(random() * registries.length)]!;
          const heldClaims = [...model.keys()];
          if (heldClaims.length > 0 && random() < 0.4) {
            const claimId = heldClaims[Math.floor(random() * heldClaims.length)]!;
            expect(await registry.release(model.get(claimId)!.reservationId, claimId)).toEqual({
              kind: 'released',
            });
            model.delete(claimId);
          } else {
            const claimId = `c${claimCounter++}`;
            const gpuMib = Math.floor(random() * 4) * 4_000;
            const modelMib = [...model.values()].reduce((sum, held) => sum + held.gpuMib, 0);
            const expected =
              model.size >= 3 ? 'host_full' : modelMib + gpuMib > 20_000 ? 'gpu_budget' : 'admitted';
            const result = await registry.admit({ ...request(claimId), gpuMib });
            expect(result.kind === 'refused' ? result.reason : result.kind).toBe(expected);
            if (result.kind === 'admitted')
              model.set(claimId, { reservationId: result.reservationId, gpuMib });
            else refusals += 1;
          }
          const held = await registry.held();
          expect(held.length).toBeLessThanOrEqual(3);
          expect(held.map((r) => r.claimId).sort()).toEqual([...model.keys()].sort());
        }
        expect(refusals).toBeGreaterThan(0);
      });
    });
  });
}

/** Deterministic pseudo-random sequence (mulberry32), so a failure replays exactly. */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}
