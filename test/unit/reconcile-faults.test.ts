/**
 * The storage-fault matrix of SPEC §8 step 5: {result.json, terminal-proof.json, board write} ×
 * {error before the rename, rename done but error reported, two consecutive failures then recovery}.
 * Every case must end, after recovery and one execute, with the board terminal, the reservation
 * released exactly once, and nothing deleted. The matrix is printed for the record.
 */
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import type {
  BoardAnnotation,
  BoardFilter,
  CapacityRegistry,
  HostLimits,
  ReservationFilter,
  TerminalCommit,
  TerminalCommitResult,
  AdmitRequest,
} from '../../src/app/ports/capacity-registry.js';
import { writeJsonVerified } from '../../src/app/durable-write.js';
import { reconcilePair, type ReconcileReport } from '../../src/app/pair/reconcile-pair.js';
import {
  buildFinishedPair,
  FakeContainerRuntime,
  outcomeSha256OrNull,
  steppingClock,
} from '../support/finished-pair.js';
import { FaultyFileSystem } from '../support/faulty-file-system.js';

/** Delegates to a real registry; `commitTerminal` throws the next `failures` times, before or after the real commit. */
class FlakyRegistry implements CapacityRegistry {
  failures = 0;
  when: 'before' | 'after' = 'before';
  /** Real commits that released the reservation (whatever the caller was told). */
  releases = 0;
  constructor(private readonly inner: CapacityRegistry) {}
  get localNode(): string {
    return this.inner.localNode;
  }
  limits(node?: string): Promise<HostLimits> {
    return this.inner.limits(node);
  }
  setLimits(limits: HostLimits, node?: string): Promise<void> {
    return this.inner.setLimits(limits, node);
  }
  nodeLimits(): ReturnType<CapacityRegistry['nodeLimits']> {
    return this.inner.nodeLimits();
  }
  portHolders(node: string, ports: readonly number[]): ReturnType<CapacityRegistry['portHolders']> {
    return this.inner.portHolders(node, ports);
  }
  reservationSources(reservationId: string): ReturnType<CapacityRegistry['reservationSources']> {
    return this.inner.reservationSources(reservationId);
  }
  schemaVersion(): ReturnType<CapacityRegistry['schemaVersion']> {
    return this.inner.schemaVersion();
  }
  admit(request: AdmitRequest): ReturnType<CapacityRegistry['admit']> {
    return this.inner.admit(request);
  }
  attachContainer(reservationId: string, containerId: string): Promise<void> {
    return this.inner.attachContainer(reservationId, containerId);
  }
  release(reservationId: string, claimId: string): ReturnType<CapacityRegistry['release']> {
    return this.inner.release(reservationId, claimId);
  }
  reservation(id: string): ReturnType<CapacityRegistry['reservation']> {
    return this.inner.reservation(id);
  }
  reservationForClaim(claimId: string): ReturnType<CapacityRegistry['reservationForClaim']> {
    return this.inner.reservationForClaim(claimId);
  }
  held(filter?: ReservationFilter): ReturnType<CapacityRegistry['held']> {
    return this.inner.held(filter);
  }
  board(filter?: BoardFilter): ReturnType<CapacityRegistry['board']> {
    return this.inner.board(filter);
  }
  annotate(claimId: string, fields: BoardAnnotation): Promise<void> {
    return this.inner.annotate(claimId, fields);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
  acquireLease(
    ...args: Parameters<CapacityRegistry['acquireLease']>
  ): ReturnType<CapacityRegistry['acquireLease']> {
    return this.inner.acquireLease(...args);
  }
  releaseLease(batchId: string, pid: number): Promise<void> {
    return this.inner.releaseLease(batchId, pid);
  }
  supervisorLease(batchId: string): ReturnType<CapacityRegistry['supervisorLease']> {
    return this.inner.supervisorLease(batchId);
  }
  async commitTerminal(commit: TerminalCommit): Promise<TerminalCommitResult> {
    const fail = this.failures > 0;
    if (fail) this.failures -= 1;
    if (fail && this.when === 'before') throw new Error('SQLITE_IOERR: injected before the transaction');
    const result = await this.inner.commitTerminal(commit);
    if (result.kind === 'committed') this.releases += 1;
    if (fail) throw new Error('SQLITE_IOERR: injected after the commit');
    return result;
  }
}

type Target = 'result.json' | 'terminal-proof.json' | 'board';
type Fault = 'error before rename' | 'rename done, error reported' | '2 failures, then recovery';
const TARGETS: readonly Target[] = ['result.json', 'terminal-proof.json', 'board'];
const FAULTS: readonly Fault[] = [
  'error before rename',
  'rename done, error reported',
  '2 failures, then recovery',
];
const EVIDENCE = [
  'batch.json',
  'jobs/pair-0001/receipt.json',
  'jobs/pair-0001/stdout.log',
  'jobs/pair-0001/stderr.log',
  'jobs/pair-0001/result.json',
  'jobs/pair-0001/terminal-proof.json',
];

const rows: string[][] = [];
let tmp: string;
let registry: SqliteCapacityRegistry;

beforeEach(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'rg-faults-'));
  registry = SqliteCapacityRegistry.open({ path: join(tmp, 'registry.db'), clock: steppingClock() });
});

afterEach(async () => {
  registry.closeSync();
  await rm(tmp, { recursive: true, force: true });
});

afterAll(() => {
  const header = [
    'target',
    'fault',
    'first attempt',
    'recovery',
    'replay',
    'board',
    'reservation',
    'releases',
    'deleted',
  ];
  const table = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...table.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]): string => `| ${r.map((c, i) => c.padEnd(widths[i] ?? 0)).join(' | ')} |`;
  const note =
    'board: "error before rename" = error before the transaction; "rename done" = committed, then an error reported';
  console.log(
    [
      '',
      'Terminal reconciliation fault matrix (SPEC §8.5)',
      note,
      line(header),
      line(widths.map((w) => '-'.repeat(w))),
      ...rows.map(line),
    ].join('\n'),
  );
});

/** The kind, the reason, and any step that shows a fault being absorbed (retry, read-back after an error). */
function describeReport(r: ReconcileReport): string {
  const absorbed = r.steps.filter((s) => /retr|after an error/.test(s)).map((s) => `[${s}]`);
  return [r.kind, r.reason ?? '', ...absorbed].filter((s) => s !== '').join(' ');
}

describe('fault matrix', () => {
  const cases = TARGETS.flatMap((target) => FAULTS.map((fault) => [target, fault] as const));
  it.each(cases)('%s × %s', async (target, fault) => {
    const root = join(tmp, 'D');
    const flaky = new FlakyRegistry(registry);
    const pair = await buildFinishedPair({
      root,
      outcomeDir: join(tmp, 'out'),
      registry,
      writeResult: target !== 'result.json',
    });
    const fs = new FaultyFileSystem(new NodeFileSystem());
    const store = new EvidenceStore(fs, root);
    const times = fault === '2 failures, then recovery' ? 2 : 1;
    const when = fault === 'rename done, error reported' ? 'after' : 'before';
    if (target === 'board') Object.assign(flaky, { failures: times, when });
    else fs.addRule({ op: 'rename', path: `/${target}`, when, times, code: times === 2 ? 'ENOSPC' : 'EIO' });
    const deps = {
      store,
      registry: flaky,
      runtime: new FakeContainerRuntime(),
      readOutcomeSha256: outcomeSha256OrNull,
    };
    const execute = (): Promise<ReconcileReport> =>
      reconcilePair(deps, { jobRel: pair.jobRel, mode: 'execute' });
    const resultRel = `${pair.jobRel}/result.json`;

    let first = '';
    if (target === 'result.json') {
      const write = await writeJsonVerified(store, resultRel, pair.result);
      first = `write ${write.kind}/${write.attempts}; `;
    }
    const r1 = await execute();
    first += `execute ${describeReport(r1)}`;
    // One failure is absorbed by the read-back or the one retry; two in a row hold until storage recovers.
    expect(r1.kind).toBe(times === 1 ? 'committed' : 'hold');
    let recovery = '-';
    if (r1.kind !== 'committed') {
      expect(r1.kind).toBe('hold');
      expect((await registry.reservation(pair.reservationId))?.state).toBe('held');
      expect((await registry.board({ claimId: pair.receipt.claim_id }))[0]?.state).toBe('running');
      const rewrite = (await store.exists(resultRel))
        ? ''
        : `rewrite result ${(await writeJsonVerified(store, resultRel, pair.result)).kind}; `;
      const r2 = await execute();
      recovery = `${rewrite}execute ${describeReport(r2)}`;
      expect(r2.kind).toBe('committed');
    }
    const releasedAt = (await registry.reservation(pair.reservationId))?.releasedAt;
    const replay = await execute();
    expect(replay.kind).toBe('already_committed');

    const board = (await registry.board({ claimId: pair.receipt.claim_id }))[0];
    const reservation = await registry.reservation(pair.reservationId);
    expect(board).toMatchObject({ state: 'terminal', proofSha256: replay.proof_sha256 });
    expect(reservation).toMatchObject({ state: 'released', proofSha256: replay.proof_sha256 });
    expect(releasedAt).toMatch(/^2025-/);
    expect(reservation?.releasedAt).toBe(releasedAt);
    expect(flaky.releases).toBe(1);
    for (const rel of EVIDENCE) expect(await store.exists(rel), rel).toBe(true);
    const unlinked = fs.calls.filter((c) => c.op === 'unlink').flatMap((c) => c.paths);
    const deleted = unlinked.filter((p) => !/\/\.[^/]+\.tmp-\d+-[0-9a-f]{16}$/.test(p));
    expect(deleted).toEqual([]);
    expect((await readdir(join(root, pair.jobRel))).filter((n) => n.includes('.tmp-'))).toEqual([]);
    rows.push([
      target,
      fault,
      first,
      recovery,
      replay.kind,
      board?.state ?? '?',
      reservation?.state ?? '?',
      String(flaky.releases),
      String(deleted.length),
    ]);
  });
});
