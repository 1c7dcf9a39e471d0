/**
 * Several connections to one registry file, as several supervisors on one host would hold.
 * Each SqliteCapacityRegistry owns its own DatabaseSync connection; the host limit must hold
 * across all of them. (The child-process variant is test/integration/registry-multiprocess.int.test.ts.)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AdmitRequest } from '../../src/app/ports/capacity-registry.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';

const CONNECTIONS = 6;

let dir: string;
let dbPath: string;
let opened: SqliteCapacityRegistry[];

function openMany(count: number, busyTimeoutMs?: number): SqliteCapacityRegistry[] {
  const registries = Array.from({ length: count }, () =>
    SqliteCapacityRegistry.open(
      busyTimeoutMs === undefined ? { path: dbPath } : { path: dbPath, busyTimeoutMs },
    ),
  );
  opened.push(...registries);
  return registries;
}

function request(claimId: string, batchId = 'batch-a'): AdmitRequest {
  return { batchId, jobId: `job-${claimId}`, claimId, gpuMib: 0 };
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

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'registry-mc-'));
  dbPath = join(dir, 'registry.db');
  opened = [];
});

afterEach(() => {
  for (const registry of opened) registry.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('registry shared by several connections', () => {
  it('admits exactly the host limit when every connection asks at once', () => {
    const registries = openMany(CONNECTIONS);
    const results = registries.map((registry, index) =>
      registry.admit(request(`c${index}`, `batch-${index}`)),
    );
    expect(results.filter((r) => r.kind === 'admitted')).toHaveLength(2);
    expect(results.slice(2)).toEqual(
      Array(CONNECTIONS - 2).fill({ kind: 'refused', reason: 'host_full', held: 2, limit: 2 }),
    );
    for (const registry of registries) expect(registry.held()).toHaveLength(2);
  });

  it('sees a release made through another connection', () => {
    const [first, second, third] = openMany(3);
    const admitted = first!.admit(request('c1'));
    second!.admit(request('c2'));
    expect(third!.admit(request('c3'))).toMatchObject({ kind: 'refused', reason: 'host_full' });
    if (admitted.kind !== 'admitted') throw new Error('expected admission');
    expect(second!.release(admitted.reservationId, 'c1')).toEqual({ kind: 'released' });
    expect(third!.admit(request('c3'))).toMatchObject({ kind: 'admitted' });
    expect(first!.release(admitted.reservationId, 'c1')).toEqual({ kind: 'already_released' });
  });

  it('keeps the limit over a long random interleaving of admits and releases', () => {
    const registries = openMany(CONNECTIONS);
    registries[0]!.setLimits({ maxReservations: 3, gpuMib: 20_000 });
    const random = seeded(20_250_101);
    const model = new Map<string, { reservationId: string; gpuMib: number }>();
    let claimCounter = 0;
    let refusals = 0;
    for (let step = 0; step < 300; step += 1) {
      const registry = registries[Math.floor(random() * CONNECTIONS)]!;
      const heldClaims = [...model.keys()];
      if (heldClaims.length > 0 && random() < 0.4) {
        const claimId = heldClaims[Math.floor(random() * heldClaims.length)]!;
        expect(registry.release(model.get(claimId)!.reservationId, claimId)).toEqual({ kind: 'released' });
        model.delete(claimId);
      } else {
        const claimId = `c${claimCounter++}`;
        const gpuMib = Math.floor(random() * 4) * 4_000;
        const modelMib = [...model.values()].reduce((sum, held) => sum + held.gpuMib, 0);
        const expected =
          model.size >= 3 ? 'host_full' : modelMib + gpuMib > 20_000 ? 'gpu_budget' : 'admitted';
        const result = registry.admit({ ...request(claimId), gpuMib });
        expect(result.kind === 'refused' ? result.reason : result.kind).toBe(expected);
        if (result.kind === 'admitted') model.set(claimId, { reservationId: result.reservationId, gpuMib });
        else refusals += 1;
      }
      const held = registry.held();
      expect(held.length).toBeLessThanOrEqual(3);
      expect(held.map((r) => r.claimId).sort()).toEqual([...model.keys()].sort());
    }
    expect(refusals).toBeGreaterThan(0);
  });

  it('waits for another writer’s transaction and counts what it committed', () => {
    const [registry] = openMany(1, 50);
    const raw = new DatabaseSync(dbPath, { timeout: 1_000 });
    try {
      raw.exec('BEGIN IMMEDIATE');
      for (const claim of ['x1', 'x2']) {
        raw
          .prepare(
            `INSERT INTO reservations (id, batch_id, job_id, claim_id, gpu_mib, state, created_at)
             VALUES (?, 'batch-x', ?, ?, 0, 'held', '2025-01-01T00:00:00.000Z')`,
          )
          .run(`r-${claim}`, `job-${claim}`, claim);
      }
      expect(() => registry!.admit(request('c1'))).toThrow(expect.objectContaining({ code: 'E_REGISTRY' }));
      raw.exec('COMMIT');
    } finally {
      raw.close();
    }
    expect(registry!.admit(request('c1'))).toEqual({
      kind: 'refused',
      reason: 'host_full',
      held: 2,
      limit: 2,
    });
    expect(registry!.reservationForClaim('c1')).toBeNull();
  });
});
