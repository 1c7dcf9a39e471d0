/**
 * Several connections to one registry file, as several supervisors on one host would hold. What holds for every
 * backend (exactly the limit admitted under concurrent admitters, releases seen across connections, a long random
 * interleaving) is in the contract suite (test/support/registry-contract.ts); this is SQLite's own: a writer waits
 * for another's transaction up to its busy timeout, and then counts what it committed.
 * (The child-process variant is test/integration/registry-multiprocess.int.test.ts.)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AdmitRequest } from '../../src/app/ports/capacity-registry.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';

let dir: string;
let dbPath: string;
let opened: SqliteCapacityRegistry[];

function request(claimId: string, batchId = 'batch-a'): AdmitRequest {
  return { batchId, jobId: `job-${claimId}`, claimId, gpuMib: 0 };
}

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'registry-mc-'));
  dbPath = join(dir, 'registry.db');
  opened = [];
});

afterEach(() => {
  for (const registry of opened) registry.closeSync();
  rmSync(dir, { recursive: true, force: true });
});

describe('registry shared by several connections (SQLite)', () => {
  it('waits for another writer’s transaction and counts what it committed', async () => {
    const registry = SqliteCapacityRegistry.open({ path: dbPath, busyTimeoutMs: 50, localNode: 'node-a' });
    opened.push(registry);
    const raw = new DatabaseSync(dbPath, { timeout: 1_000 });
    try {
      raw.exec('BEGIN IMMEDIATE');
      for (const claim of ['x1', 'x2']) {
        raw
          .prepare(
            `INSERT INTO reservations (id, batch_id, job_id, claim_id, node, gpu_mib, state, created_at)
             VALUES (?, 'batch-x', ?, ?, 'node-a', 0, 'held', '2025-01-01T00:00:00.000Z')`,
          )
          .run(`r-${claim}`, `job-${claim}`, claim);
      }
      // Busy past its busy timeout (the registry deadline, 50 ms here): unavailable for now, within the deadline.
      const t0 = performance.now();
      await expect(registry.admit(request('c1'))).rejects.toMatchObject({
        code: 'E_REGISTRY_UNAVAILABLE',
        message: expect.stringMatching(/locked past its busy timeout/),
      });
      expect(performance.now() - t0).toBeLessThan(2_000);
      raw.exec('COMMIT');
    } finally {
      raw.close();
    }
    expect(await registry.admit(request('c1'))).toEqual({
      kind: 'refused',
      reason: 'host_full',
      held: 2,
      limit: 2,
      node: 'node-a',
    });
    expect(await registry.reservationForClaim('c1')).toBeNull();
  });
});
