import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AdmitRequest, TerminalCommit } from '../../src/app/ports/capacity-registry.js';
import { defaultRegistryPath, resolveRegistryPath } from '../../src/adapters/registry/default-path.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { InvalidInputError, RoboguideError } from '../../src/core/errors.js';

let dir: string;
let dbPath: string;
let opened: SqliteCapacityRegistry[];
let tick: number;
let nextId: number;

const clock = { now: () => new Date(Date.UTC(2025, 0, 1, 0, 0, tick++)) };
const newId = () => `res-${nextId++}`;

function openRegistry(path = dbPath): SqliteCapacityRegistry {
  const registry = SqliteCapacityRegistry.open({ path, clock, newId });
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
    runId: claimId,
    reservationId,
    classification: 'completed',
    outcomeSha256: 'o'.repeat(64),
    proofSha256: 'p'.repeat(64),
    ...overrides,
  };
}

function admitted(
  registry: SqliteCapacityRegistry,
  claimId: string,
  overrides: Partial<AdmitRequest> = {},
): string {
  const result = registry.admit(request(claimId, overrides));
  if (result.kind !== 'admitted') throw new Error(`expected admission, got ${JSON.stringify(result)}`);
  return result.reservationId;
}

/** A second, raw connection to the same file, for states the API cannot produce. */
function rawSql(sql: string, ...params: string[]): void {
  const db = new DatabaseSync(dbPath, { timeout: 1_000 });
  try {
    db.prepare(sql).run(...params);
  } finally {
    db.close();
  }
}

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'registry-'));
  dbPath = join(dir, 'state', 'roboguide-eval', 'registry.db');
  opened = [];
  tick = 0;
  nextId = 1;
});

afterEach(() => {
  for (const registry of opened) registry.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('opening', () => {
  it('creates private parent directories, WAL mode and the schema; reopening keeps the data', () => {
    const registry = openRegistry();
    registry.setLimits({ maxReservations: 3, gpuMib: 8_000 });
    const reservationId = admitted(registry, 'c1', { gpuMib: 1_000 });
    registry.close();

    expect(statSync(join(dir, 'state', 'roboguide-eval')).mode & 0o777).toBe(0o700);
    const raw = new DatabaseSync(dbPath);
    expect(raw.prepare('PRAGMA journal_mode').get()).toEqual({ journal_mode: 'wal' });
    expect(raw.prepare('SELECT version FROM schema_version').all()).toEqual([{ version: 1 }, { version: 2 }]);
    raw.close();

    const reopened = openRegistry();
    expect(reopened.limits()).toEqual({ maxReservations: 3, gpuMib: 8_000 });
    expect(reopened.reservationForClaim('c1')).toMatchObject({
      id: reservationId,
      state: 'held',
      gpuMib: 1_000,
    });
    expect(reopened.board()).toHaveLength(1);
  });

  it('starts with the default limits: 2 reservations, no GPU limit', () => {
    expect(openRegistry().limits()).toEqual({ maxReservations: 2, gpuMib: null });
  });

  it('refuses a database written by a newer schema', () => {
    openRegistry().close();
    rawSql('INSERT INTO schema_version (version) VALUES (99)');
    expect(() => openRegistry()).toThrow(expect.objectContaining({ code: 'E_REGISTRY' }));
  });
});

describe('admission', () => {
  it('admits within the host limit and writes a running board row', () => {
    const registry = openRegistry();
    const first = admitted(registry, 'c1');
    const second = admitted(registry, 'c2', { batchId: 'batch-b' });
    expect(registry.held().map((r) => r.id)).toEqual([first, second]);
    expect(registry.held({ batchId: 'batch-b' }).map((r) => r.id)).toEqual([second]);
    expect(registry.reservation(first)).toEqual({
      id: first,
      batchId: 'batch-a',
      jobId: 'job-c1',
      claimId: 'c1',
      containerId: null,
      gpuMib: 0,
      state: 'held',
      createdAt: '2025-01-01T00:00:00.000Z',
      releasedAt: null,
      proofSha256: null,
    });
    expect(registry.board({ runId: 'c1' })).toEqual([
      {
        batchId: 'batch-a',
        jobId: 'job-c1',
        runId: 'c1',
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

  it('refuses at the limit across batches and inserts nothing', () => {
    const registry = openRegistry();
    admitted(registry, 'c1');
    admitted(registry, 'c2', { batchId: 'batch-b' });
    expect(registry.admit(request('c3'))).toEqual({
      kind: 'refused',
      reason: 'host_full',
      held: 2,
      limit: 2,
    });
    expect(registry.reservationForClaim('c3')).toBeNull();
    expect(registry.board({ runId: 'c3' })).toEqual([]);
    expect(registry.held()).toHaveLength(2);
  });

  it('enforces the GPU budget over held reservations only', () => {
    const registry = openRegistry();
    registry.setLimits({ maxReservations: 5, gpuMib: 10_000 });
    const big = admitted(registry, 'c1', { gpuMib: 6_000 });
    expect(registry.admit(request('c2', { gpuMib: 5_000 }))).toEqual({
      kind: 'refused',
      reason: 'gpu_budget',
      held: 6_000,
      limit: 10_000,
    });
    admitted(registry, 'c3', { gpuMib: 4_000 });
    admitted(registry, 'c4', { gpuMib: 0 });
    expect(registry.release(big, 'c1')).toEqual({ kind: 'released' });
    admitted(registry, 'c2', { gpuMib: 5_000 });
  });

  it('is idempotent per claim and rejects a claim reused by another run', () => {
    const registry = openRegistry();
    const id = admitted(registry, 'c1');
    expect(registry.admit(request('c1'))).toEqual({ kind: 'already_admitted', reservationId: id });
    expect(registry.held()).toHaveLength(1);
    expect(() => registry.admit(request('c1', { batchId: 'batch-b' }))).toThrow(RoboguideError);
    expect(registry.held()).toHaveLength(1);
  });

  it('rejects invalid requests and limits as invalid input', () => {
    const registry = openRegistry();
    expect(() => registry.admit(request('c1', { gpuMib: -1 }))).toThrow(InvalidInputError);
    expect(() => registry.admit(request(''))).toThrow(InvalidInputError);
    expect(() => registry.setLimits({ maxReservations: 0, gpuMib: null })).toThrow(InvalidInputError);
    expect(() => registry.setLimits({ maxReservations: 2, gpuMib: 1.5 })).toThrow(InvalidInputError);
    expect(registry.limits()).toEqual({ maxReservations: 2, gpuMib: null });
  });
});

describe('containers and release', () => {
  it('attaches a container once, idempotently', () => {
    const registry = openRegistry();
    const id = admitted(registry, 'c1');
    registry.attachContainer(id, 'ctr-1');
    registry.attachContainer(id, 'ctr-1');
    expect(registry.reservation(id)?.containerId).toBe('ctr-1');
    expect(() => registry.attachContainer(id, 'ctr-2')).toThrow(RoboguideError);
    expect(() => registry.attachContainer('nope', 'ctr-1')).toThrow(RoboguideError);
    registry.release(id, 'c1');
    expect(() => registry.attachContainer(id, 'ctr-1')).toThrow(RoboguideError);
  });

  it('refuses a release by another claim or of an unknown reservation, keeping it held', () => {
    const registry = openRegistry();
    const id = admitted(registry, 'c1');
    expect(registry.release(id, 'c2')).toEqual({ kind: 'refused', reason: 'not_held_by_claim' });
    expect(registry.release('nope', 'c1')).toEqual({ kind: 'refused', reason: 'unknown_reservation' });
    expect(registry.reservation(id)?.state).toBe('held');
  });

  it('releases once; a second release reports already_released and changes nothing', () => {
    const registry = openRegistry();
    const id = admitted(registry, 'c1');
    expect(registry.release(id, 'c1')).toEqual({ kind: 'released' });
    const after = registry.reservation(id);
    expect(after).toMatchObject({ state: 'released', releasedAt: '2025-01-01T00:00:01.000Z' });
    expect(registry.release(id, 'c1')).toEqual({ kind: 'already_released' });
    expect(registry.reservation(id)).toEqual(after);
    expect(registry.held()).toEqual([]);
  });
});

describe('commitTerminal', () => {
  it('writes the board row terminal and releases the reservation, with read-backs', () => {
    const registry = openRegistry();
    const id = admitted(registry, 'c1');
    const result = registry.commitTerminal(
      terminal('c1', id, { classification: 'fatal', outcomeSha256: null }),
    );
    expect(result).toEqual({
      kind: 'committed',
      steps: ['board_written_terminal', 'board_read_back', 'reservation_released', 'reservation_read_back'],
    });
    expect(registry.board({ runId: 'c1' })[0]).toMatchObject({
      state: 'terminal',
      classification: 'fatal',
      outcomeSha256: null,
      proofSha256: 'p'.repeat(64),
      updatedAt: '2025-01-01T00:00:01.000Z',
    });
    expect(registry.reservation(id)).toMatchObject({ state: 'released', proofSha256: 'p'.repeat(64) });
  });

  it('replays as a no-op that preserves later fields', () => {
    const registry = openRegistry();
    const id = admitted(registry, 'c1');
    registry.commitTerminal(terminal('c1', id));
    registry.annotate('c1', { score: '0.75' });
    registry.annotate('c1', { notes: 'checked by hand' });
    const board = registry.board({ runId: 'c1' });
    const reservation = registry.reservation(id);
    expect(board[0]).toMatchObject({ score: '0.75', notes: 'checked by hand' });

    expect(registry.commitTerminal(terminal('c1', id))).toEqual({
      kind: 'already_committed',
      steps: ['board_already_terminal', 'reservation_already_released'],
    });
    expect(registry.board({ runId: 'c1' })).toEqual(board);
    expect(registry.reservation(id)).toEqual(reservation);
    expect(registry.release(id, 'c1')).toEqual({ kind: 'already_released' });
  });

  it('refuses a proof that differs from the terminal one and changes nothing', () => {
    const registry = openRegistry();
    const id = admitted(registry, 'c1');
    registry.commitTerminal(terminal('c1', id));
    const board = registry.board();
    const result = registry.commitTerminal(
      terminal('c1', id, { proofSha256: 'q'.repeat(64), classification: 'fatal' }),
    );
    expect(result).toMatchObject({ kind: 'refused', reason: 'proof_mismatch' });
    expect(registry.board()).toEqual(board);
  });

  it('keeps the reservation held on every refusal', () => {
    const registry = openRegistry();
    const id = admitted(registry, 'c1');
    const other = admitted(registry, 'c2');
    const refusals = [
      [terminal('c1', 'nope'), 'unknown_reservation'],
      [terminal('c1', id, { batchId: 'batch-b' }), 'run_owned_by_other_batch'],
      [terminal('c2', id), 'reservation_not_held_by_claim'],
      [terminal('c1', id, { jobId: 'job-other' }), 'reservation_not_held_by_claim'],
    ] as const;
    for (const [commit, reason] of refusals) {
      expect(registry.commitTerminal(commit)).toMatchObject({ kind: 'refused', reason });
    }
    expect(registry.held().map((r) => r.id)).toEqual([id, other]);
    expect(registry.board().map((row) => row.state)).toEqual(['running', 'running']);
  });

  it('refuses a reservation released outside reconciliation', () => {
    const registry = openRegistry();
    const id = admitted(registry, 'c1');
    registry.release(id, 'c1');
    expect(registry.commitTerminal(terminal('c1', id))).toMatchObject({
      kind: 'refused',
      reason: 'reservation_not_held_by_claim',
    });
    expect(registry.board({ runId: 'c1' })[0]?.state).toBe('running');
  });

  it('completes the release when the board is already terminal with the same proof', () => {
    const registry = openRegistry();
    const id = admitted(registry, 'c1');
    rawSql(
      `UPDATE board SET state = 'terminal', classification = 'completed', proof_sha256 = ? WHERE run_id = 'c1'`,
      'p'.repeat(64),
    );
    expect(registry.commitTerminal(terminal('c1', id, { proofSha256: 'q'.repeat(64) }))).toMatchObject({
      kind: 'refused',
      reason: 'proof_mismatch',
    });
    expect(registry.reservation(id)?.state).toBe('held');
    expect(registry.commitTerminal(terminal('c1', id))).toEqual({
      kind: 'committed',
      steps: ['board_already_terminal', 'reservation_released', 'reservation_read_back'],
    });
    expect(registry.held()).toEqual([]);
  });

  it('refuses a run id that another batch already has on the board', () => {
    const registry = openRegistry();
    const id = admitted(registry, 'c1');
    rawSql(`UPDATE board SET batch_id = 'batch-z' WHERE run_id = 'c1'`);
    expect(registry.commitTerminal(terminal('c1', id))).toMatchObject({
      kind: 'refused',
      reason: 'run_owned_by_other_batch',
    });
    expect(registry.reservation(id)?.state).toBe('held');
  });
});

describe('board', () => {
  it('filters by batch and run, and refuses to annotate an unknown run', () => {
    const registry = openRegistry();
    admitted(registry, 'c1');
    admitted(registry, 'c2', { batchId: 'batch-b' });
    expect(registry.board({ batchId: 'batch-b' }).map((row) => row.runId)).toEqual(['c2']);
    expect(registry.board({ batchId: 'batch-a', runId: 'c2' })).toEqual([]);
    expect(() => registry.annotate('nope', { score: '1' })).toThrow(RoboguideError);
  });
});

describe('registry path', () => {
  it('uses an absolute XDG_STATE_HOME, else ~/.local/state; --registry wins', () => {
    expect(defaultRegistryPath({ XDG_STATE_HOME: '/xdg' }, '/home/u')).toBe(
      '/xdg/roboguide-eval/registry.db',
    );
    expect(defaultRegistryPath({ XDG_STATE_HOME: 'rel' }, '/home/u')).toBe(
      '/home/u/.local/state/roboguide-eval/registry.db',
    );
    expect(defaultRegistryPath({}, '/home/u')).toBe('/home/u/.local/state/roboguide-eval/registry.db');
    expect(resolveRegistryPath('/tmp/r.db', { XDG_STATE_HOME: '/xdg' }, '/home/u')).toBe('/tmp/r.db');
    expect(resolveRegistryPath(undefined, { XDG_STATE_HOME: '/xdg' }, '/home/u')).toBe(
      '/xdg/roboguide-eval/registry.db',
    );
  });
});

describe('supervisor lease', () => {
  it('grants one live supervisor per batch, hands over from a dead one, and is released by its holder only', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rg-lease-'));
    const a = SqliteCapacityRegistry.open({ path: join(dir, 'r.db') });
    const b = SqliteCapacityRegistry.open({ path: join(dir, 'r.db') });
    const first = { pid: 100, start_ticks: '1', boot_id: 'boot' };
    const second = { pid: 200, start_ticks: '2', boot_id: 'boot' };
    let firstAlive = true;
    const alive = (h: { pid: number }) => (h.pid === 100 ? firstAlive : true);
    expect(a.acquireLease('batch-1', first, alive)).toEqual({ kind: 'acquired' });
    expect(b.acquireLease('batch-1', second, alive)).toEqual({ kind: 'held', holder: first });
    expect(b.acquireLease('batch-2', second, alive)).toEqual({ kind: 'acquired' }); // another batch: independent
    expect(a.acquireLease('batch-1', first, alive)).toEqual({ kind: 'acquired' }); // re-entrant for the holder
    b.releaseLease('batch-1', 200); // not the holder: nothing happens
    expect(b.acquireLease('batch-1', second, alive)).toMatchObject({ kind: 'held' });
    firstAlive = false; // the holder died
    expect(b.acquireLease('batch-1', second, alive)).toEqual({ kind: 'acquired' });
    b.releaseLease('batch-1', 200);
    firstAlive = true;
    expect(a.acquireLease('batch-1', first, alive)).toEqual({ kind: 'acquired' });
    a.close();
    b.close();
    rmSync(dir, { recursive: true, force: true });
  });
});
