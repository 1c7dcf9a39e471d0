import { isWrittenStatus } from '../../../../src/app/batch/status-shapes.js';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { NodeFileSystem } from '../../../../src/adapters/fs/node-file-system.js';
import { procHostIdentity } from '../../../../src/adapters/host-identity.js';
import { loadBatch, type JobFiles } from '../../../../src/app/batch/batch-context.js';
import type { ResolvedJobEnvironment } from '../../../../src/core/manifest/environment.js';
import type { RunningHandle } from '../../../../src/app/pair/claimed-pair-types.js';
import { STATUS_FILE, NODES_DOWN_FILE } from '../../../../src/core/evidence-names.js';
import { seedLedger } from '../../../../src/app/batch/supervisor-ledger.js';
import {
  admissionNodesOf,
  bestEffort,
  loopPorts,
  outcomeOfAttempt,
  statusWriterOf,
  type Supervision,
} from '../../../../src/app/batch/supervisor-ports.js';
import type { CoalescingWriter } from '../../../../src/app/batch/status-writer.js';
import type { EvidenceStore } from '../../../../src/app/evidence/evidence-store.js';
import type { JournalEvent, ClaimedEvent } from '../../../../src/core/journal-events.js';
import type { ExecutorInventory } from '../../../../src/app/ports/executor-inventory.js';
import { silentLogger, type Logger } from '../../../../src/app/ports/logger.js';
import type { ExecutorConfig } from '../../../../src/core/executor.js';
import type { FinishReport } from '../../../../src/app/batch/finish-pair.js';
import { claimJob, finishJob, startTestBatch, type TestBatch } from '../../../support/batch-dir.js';
import { executeDeps, fakeOf, fakeRegistry } from '../../../support/fakes.js';
import type { ResultRecord } from '../../../../src/core/result.js';
import { rawJournalRecord } from '../../../support/raw-journal.js';
import { clockAt } from '../../../support/fake-time.js';

/**
 * The supervisor's wiring (supervisor-ports) and the ledger it writes status from (supervisor-ledger), each port
 * driven on its own against a real batch directory, with a fake engine and registry behind the ports.
 */

const clock = clockAt(() => new Date('2026-12-02T10:05:00Z'));
let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-sup-ports-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const SWARM: ExecutorConfig = {
  kind: 'swarm',
  manager: 'unix:///run/docker.sock',
  node_engines: { n1: 'tcp://n1:2376', n2: 'tcp://n2:2376', n3: 'tcp://n3:2376' },
};

interface Rig {
  readonly tb: TestBatch;
  readonly s: Supervision;
  readonly journalled: { type: string; fields: Record<string, unknown> }[];
  readonly admits: { node?: string | undefined }[];
}

/** A supervision over a real prepared batch; the registry refuses every admission and records where it was asked. */
async function rig(
  inventory: ExecutorInventory = {},
  options: { executor?: ExecutorConfig; logger?: Logger } = {},
): Promise<Rig> {
  const tb = await startTestBatch(dir, options.executor ? { executor: options.executor } : {});
  const { batch, manifest } = await loadBatch(tb.store);
  const seeded = await seedLedger(tb.store, manifest);
  const journalled: Rig['journalled'] = [];
  const admits: Rig['admits'] = [];
  const registry = fakeRegistry({
    localNode: 'here',
    admit: (request) => {
      admits.push({ node: request.node });
      return Promise.resolve({ kind: 'refused', reason: 'host_full', held: 1, limit: 1, node: 'here' });
    },
  });
  const execute = executeDeps({
    ...inventory,
    clock,
    logger: silentLogger,
    fs: new NodeFileSystem(),
    host: procHostIdentity,
  });
  const s: Supervision = {
    deps: {
      store: tb.store,
      registry,
      execute,
      logger: options.logger ?? silentLogger,
      environment: {},
      handleSignals: false,
    },
    batch,
    manifest,
    record: {
      pid: 1,
      start_ticks: null,
      boot_id: null,
      started_at: '2026-12-02T10:00:00.000Z',
      mode: 'start',
    },
    journal: (type, fields) => {
      journalled.push({ type, fields: fields });
      return Promise.resolve();
    },
    book: seeded.book,
    peaks: seeded.peaks,
    stopFolding: seeded.stopFolding,
  };
  return { tb, s, journalled, admits };
}

function writerSpy(): { writer: CoalescingWriter; soon: number; now: number } {
  const spy = { soon: 0, now: 0 };
  const writer = fakeOf<CoalescingWriter>('CoalescingWriter', {
    soon: () => {
      spy.soon++;
    },
    now: () => {
      spy.now++;
      return Promise.resolve();
    },
  });
  return Object.assign(spy, { writer });
}

/** `real` with some methods replaced (a Proxy that binds the rest to `real`, whose fields are private). */
function overriding(real: EvidenceStore, overrides: Record<string, unknown>): EvidenceStore {
  return new Proxy(real, {
    get: (target, key) => {
      if (typeof key === 'string' && key in overrides) return overrides[key];
      const value = Reflect.get(target, key, target) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

const ENV: ResolvedJobEnvironment = { values: {}, secrets: [], warnings: [] };

function handleOf(jobId: string, containerId: string | null): RunningHandle {
  return {
    jobId,
    containerId,
    startedAt: '2026-12-02T10:00:00.000Z',
    deadline: '2026-12-02T10:02:00.000Z',
    terminate: new AbortController(),
    killNow: new AbortController(),
  };
}

describe('loopPorts: dispatch and recover', () => {
  it('a refused admission comes back as a refused outcome, and nothing is claimed', async () => {
    const { s, admits, tb } = await rig();
    const ports = loopPorts(s, [], new Map([['a', ENV]]), writerSpy().writer);
    const onRunning = vi.fn();
    await expect(ports.dispatch('a', onRunning)).resolves.toEqual({ kind: 'refused', reason: 'host_full' });
    expect(admits).toEqual([{ node: undefined }]);
    expect(onRunning).not.toHaveBeenCalled();
    expect(await tb.store.readJson('jobs/a/receipt.json')).toBeNull();
  });

  it('a job outside the manifest, or one without a resolved environment, is refused before admission', async () => {
    const { s, admits } = await rig();
    const ports = loopPorts(s, [], new Map([['a', ENV]]), writerSpy().writer);
    expect(() => ports.dispatch('zz', () => undefined)).toThrow(/job zz is not in the manifest/);
    expect(() => ports.dispatch('b', () => undefined)).toThrow(/job b has no resolved environment/);
    expect(admits).toEqual([]);
  });

  it('recovery needs a receipt read at start', async () => {
    const { s } = await rig();
    const files: JobFiles[] = s.manifest.jobs.map((job) => ({ job, receipt: null, result: null }));
    const ports = loopPorts(s, files, new Map(), writerSpy().writer);
    expect(() => ports.recover('a', () => undefined)).toThrow(/job a has no receipt to recover/);
    expect(() => ports.recover('zz', () => undefined)).toThrow(/not in the manifest/);
  });
});

describe('loopPorts: journal, status and the source check', () => {
  it('journals each supervisor event with its own fields', async () => {
    const { s, journalled } = await rig();
    const ports = loopPorts(s, [], new Map(), writerSpy().writer);
    await ports.journal({ type: 'paused', reasons: ['source_changed'] } as never);
    await ports.journal({ type: 'paused', reasons: ['harness_fault'], job_id: 'a' } as never);
    await ports.journal({ type: 'stop_requested', terminate: true } as never);
    await ports.journal({ type: 'admission_refused', job_id: 'b', reason: 'gpu_budget' } as never);
    expect(journalled).toEqual([
      { type: 'paused', fields: { reasons: ['source_changed'] } },
      { type: 'paused', fields: { reasons: ['harness_fault'], job_id: 'a' } },
      { type: 'stop_requested', fields: { terminate: true } },
      { type: 'admission_refused', fields: { job_id: 'b', reason: 'gpu_budget' } },
    ]);
  });

  it('status now and soon go to the writer; GPU peaks come from the ledger', async () => {
    const { s } = await rig();
    const spy = writerSpy();
    const ports = loopPorts(s, [], new Map(), spy.writer);
    await ports.writeStatus();
    ports.statusSoon();
    ports.statusSoon();
    expect({ now: spy.now, soon: spy.soon }).toEqual({ now: 1, soon: 2 });
    expect(ports.gpuPeaksMib()).toEqual([]);
  });

  it('the source check journals what it checked (no pinned source: ok)', async () => {
    const { s, journalled } = await rig();
    const ports = loopPorts(s, [], new Map(), writerSpy().writer);
    await expect(ports.checkSources('before_dispatch' as never)).resolves.toBe(true);
    expect(journalled).toEqual([
      { type: 'source_check', fields: { phase: 'before_dispatch', ok: true, checked: 0, mismatched: [] } },
    ]);
  });
});

describe('outcomeOfAttempt', () => {
  it('maps a refusal, a failed claim and a finished run', () => {
    expect(outcomeOfAttempt({ kind: 'refused', reason: 'ports_busy' })).toEqual({
      kind: 'refused',
      reason: 'ports_busy',
    });
    expect(outcomeOfAttempt({ kind: 'claim_failed', reason: 'already_claimed' })).toEqual({
      kind: 'claim_failed',
      reason: 'already_claimed',
    });
    const finish = fakeOf<FinishReport>(
      'FinishReport',
      {
        result: fakeOf<ResultRecord>('ResultRecord', { classification: 'harness_failure' }),
        pauseReasons: ['harness'],
      },
      ['cause'],
    );
    expect(outcomeOfAttempt({ kind: 'ran', finish })).toEqual({
      kind: 'finished',
      classification: 'harness_failure',
      pauseReasons: ['harness'],
    });
  });
});

describe('bestEffort', () => {
  it('logs a failed write instead of throwing', async () => {
    const errors: unknown[] = [];
    const logger = { ...silentLogger, error: (fields: unknown) => errors.push(fields) } as Logger;
    await bestEffort(logger, 'journal x', () =>
      Promise.reject(Object.assign(new Error('disk full'), { code: 'ENOSPC' })),
    );
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ what: 'journal x' });
  });
});

describe('swarm placement watch', () => {
  it('is not offered when the runtime cannot say where a container runs', async () => {
    const { s } = await rig();
    expect(loopPorts(s, [], new Map(), writerSpy().writer).watchPlacement).toBeUndefined();
  });

  it('a placement the runtime answers late (after an error and a not-yet) is journalled once, with the node on the handle', async () => {
    const answers: (() => Promise<{ node: string } | null>)[] = [
      () => Promise.reject(new Error('manager busy')),
      () => Promise.resolve(null),
      () => Promise.resolve({ node: 'n2' }),
    ];
    const asked: string[] = [];
    const { s, journalled } = await rig({
      placements: {
        placementOf: (id: string) => {
          asked.push(id);
          return (answers.shift() ?? (() => Promise.resolve({ node: 'n9' })))();
        },
      },
    });
    const spy = writerSpy();
    const ports = loopPorts(s, [], new Map(), spy.writer);
    const handle = handleOf('a', 'c-a');
    ports.watchPlacement?.(handle, () => true);
    await vi.waitFor(() => expect(journalled).toHaveLength(1), { timeout: 5000, interval: 50 });
    expect(journalled).toEqual([{ type: 'pair_placed', fields: { job_id: 'a', node: 'n2' } }]);
    expect(handle.node).toBe('n2');
    expect(spy.soon).toBe(1);
    expect(asked).toEqual(['c-a', 'c-a', 'c-a']);
  });

  it('a pair that stops running before the swarm places it is never journalled as placed; no container yet: nothing asked', async () => {
    const asked: string[] = [];
    const { s, journalled } = await rig({
      placements: {
        placementOf: (id: string) => {
          asked.push(id);
          return Promise.resolve(null);
        },
      },
    });
    const spy = writerSpy();
    const ports = loopPorts(s, [], new Map(), spy.writer);
    const handle = handleOf('a', null);
    let polls = 0;
    ports.watchPlacement?.(handle, () => polls++ < 2);
    await vi.waitFor(() => expect(polls).toBeGreaterThanOrEqual(3), { timeout: 5000, interval: 50 });
    expect(asked).toEqual([]);
    expect(journalled).toEqual([]);
    expect(handle.node).toBeUndefined();
    expect(spy.soon).toBe(0);
  });

  it('a placement whose journal write fails still sets the node and asks for status', async () => {
    const errors: unknown[] = [];
    const logger = { ...silentLogger, error: (fields: unknown) => errors.push(fields) } as Logger;
    const { s } = await rig(
      { placements: { placementOf: () => Promise.resolve({ node: 'n1' }) } },
      { logger },
    );
    const failing: Supervision = { ...s, journal: () => Promise.reject(new Error('EIO')) };
    const spy = writerSpy();
    const handle = handleOf('a', 'c-a');
    loopPorts(failing, [], new Map(), spy.writer).watchPlacement?.(handle, () => true);
    await vi.waitFor(() => expect(spy.soon).toBe(1), { timeout: 5000, interval: 20 });
    expect(handle.node).toBe('n1');
    expect(errors).toEqual([expect.objectContaining({ what: 'journal pair_placed' })]);
  });
});

describe('admissionNodesOf', () => {
  it('none for a local batch, or a swarm executor without a node inventory', async () => {
    const local = await rig({ nodes: { readyNodes: () => Promise.resolve(['n1']) } });
    expect(admissionNodesOf(local.s)).toBeUndefined();
    await rm(join(dir, 'batch'), { recursive: true, force: true });
    const swarm = await rig({}, { executor: SWARM });
    expect(admissionNodesOf(swarm.s)).toBeUndefined();
  });

  it('the ready nodes less those declared down, rotated one step per pair', async () => {
    const constraintsSeen: (readonly string[] | undefined)[] = [];
    const { s, tb } = await rig(
      {
        nodes: {
          readyNodes: (constraints?: readonly string[]) => {
            constraintsSeen.push(constraints);
            return Promise.resolve(['n1', 'n2', 'n3']);
          },
        },
      },
      { executor: SWARM },
    );
    await tb.store.writeJsonAtomic(NODES_DOWN_FILE, {
      schema: 'roboguide.e1.nodes_down/v1',
      nodes: [{ node: 'n2', declared_at: '2026-12-02T10:01:00.000Z' }],
    });
    const nodes = admissionNodesOf(s);
    expect(nodes).toBeDefined();
    expect(await nodes?.(['node.labels.gpu==1'])).toEqual(['n1', 'n3']);
    expect(await nodes?.([])).toEqual(['n3', 'n1']);
    expect(await nodes?.([])).toEqual(['n1', 'n3']);
    expect(constraintsSeen[0]).toEqual(['node.labels.gpu==1']);
  });

  it('a manager that cannot answer, or only down nodes: no node to admit on (the pair waits)', async () => {
    let fail = true;
    const { s, tb } = await rig(
      {
        nodes: {
          readyNodes: () => (fail ? Promise.reject(new Error('manager down')) : Promise.resolve(['n2'])),
        },
      },
      { executor: SWARM },
    );
    const nodes = admissionNodesOf(s);
    expect(await nodes?.([])).toEqual([]);
    fail = false;
    await tb.store.writeJsonAtomic(NODES_DOWN_FILE, {
      schema: 'roboguide.e1.nodes_down/v1',
      nodes: [{ node: 'n2', declared_at: '2026-12-02T10:01:00.000Z' }],
    });
    expect(await nodes?.([])).toEqual([]);
  });

  it('an unreadable nodes-down file counts as none down', async () => {
    const { s, tb } = await rig(
      { nodes: { readyNodes: () => Promise.resolve(['n1']) } },
      { executor: SWARM },
    );
    await tb.store.writeBytesAtomic?.(NODES_DOWN_FILE, new TextEncoder().encode('{not json'));
    const nodes = admissionNodesOf(s);
    expect(await nodes?.([])).toEqual(['n1']);
  });

  it('a swarm dispatch tries the nodes in turn, each refused', async () => {
    const { s, admits } = await rig(
      { nodes: { readyNodes: () => Promise.resolve(['n1', 'n2']) } },
      { executor: SWARM },
    );
    const ports = loopPorts(s, [], new Map([['a', ENV]]), writerSpy().writer);
    await expect(ports.dispatch('a', () => undefined)).resolves.toMatchObject({ kind: 'refused' });
    expect(admits).toEqual([{ node: 'n1' }, { node: 'n2' }]);
  });
});

describe('statusWriterOf', () => {
  it('writes status.json from the ledger, with the running pairs and their node', async () => {
    const { s, tb } = await rig();
    let pokes = 0;
    const handle = { ...handleOf('a', 'c-a'), node: 'n1' };
    const writer = statusWriterOf(s, () => [handle, handleOf('b', null)], { poke: () => pokes++ } as never);
    await writer.now();
    const status = await tb.store.readJson(STATUS_FILE, isWrittenStatus);
    expect(status?.running).toEqual([
      expect.objectContaining({ job_id: 'a', container_id: 'c-a', node: 'n1' }),
      expect.objectContaining({ job_id: 'b', container_id: null }),
    ]);
    expect(status?.running[1]).not.toHaveProperty('node');
    expect(pokes).toBe(1);
  });

  it('a job the ledger cannot settle is settled from its files before status is written', async () => {
    const { s, tb } = await rig();
    const receipt = await claimJob(tb, 'a');
    await finishJob(tb, receipt);
    // The claim and the finish journalled in a form the ledger is unsure of: only the files can say.
    s.book.apply({ type: 'pair_finished', seq: 99, at: '2026-12-02T10:01:02.000Z', job_id: 'a' } as never);
    expect(s.book.unsettled()).toEqual(['a']);
    const writer = statusWriterOf(s, () => [], { poke: () => undefined } as never);
    await writer.now();
    expect(s.book.unsettled()).toEqual([]);
    expect(s.book.finishedJobs()).toContain('a');
    expect(await tb.store.readJson(STATUS_FILE)).not.toBeNull();
  });

  it('a swarm batch writes status too (GPUs per node come from the manifest jobs)', async () => {
    const { s, tb } = await rig({}, { executor: SWARM });
    const writer = statusWriterOf(s, () => [{ ...handleOf('a', 'c-a'), node: 'n1' }], {
      poke: () => undefined,
    } as never);
    await writer.now();
    expect(await tb.store.readJson(STATUS_FILE)).not.toBeNull();
  });

  it('a failed status write is logged, not thrown', async () => {
    const errors: unknown[] = [];
    const logger = { ...silentLogger, error: (fields: unknown) => errors.push(fields) } as Logger;
    const { s } = await rig({}, { logger });
    const broken = {
      ...s,
      deps: {
        ...s.deps,
        store: overriding(s.deps.store, { writeJsonAtomic: () => Promise.reject(new Error('EIO')) }),
      },
    };
    const writer = statusWriterOf(broken, () => [], { poke: () => undefined } as never);
    await writer.now();
    expect(errors).toEqual([
      expect.objectContaining({ what: 'status.json', err: { kind: 'Error', message: 'EIO' } }),
    ]);
  });
});

describe('seedLedger', () => {
  type Listener = (record: JournalEvent & { readonly seq: number }, endBytes: number) => void;

  /** A store that replays `journal` and lets the test append records (to the listener) at chosen moments. */
  function scriptedStore(
    real: EvidenceStore,
    journal: (JournalEvent & { seq: number })[],
    duringRead: (emit: Listener) => void,
    failRead = false,
  ) {
    let listener: Listener | undefined;
    let stopped = 0;
    const store = overriding(real, {
      onJournalAppend: (l: Listener) => {
        listener = l;
        return () => {
          stopped++;
          listener = undefined;
        };
      },
      readJournalSlice: () => {
        if (failRead) return Promise.reject(new Error('EIO'));
        const slice = { records: [...journal], endBytes: 100 * journal.length };
        // Records appended after the journal was read, before the ledger exists.
        duringRead((r, b) => listener?.(r, b));
        return Promise.resolve(slice);
      },
    });
    return {
      store,
      emit: (r: JournalEvent & { seq: number }, b: number) => listener?.(r, b),
      stopped: () => stopped,
    };
  }

  const claimed = (seq: number, job: string): ClaimedEvent & { seq: number } => ({
    type: 'claimed',
    seq,
    at: '2026-12-02T10:00:01.000Z',
    job_id: job,
    claim_id: `k-${job}`,
    reservation_id: `r-${job}`,
    claimed_at: '2026-12-02T10:00:01.000Z',
    deadline: '2026-12-02T10:02:01.000Z',
  });
  /** A pair_finished record as the ledger reads it: only its peak matters here (one not a number, too). */
  const finished = (seq: number, job: string, peak?: unknown): JournalEvent & { seq: number } =>
    Object.assign(
      rawJournalRecord({
        type: 'pair_finished',
        at: '2026-12-02T10:01:00.000Z',
        job_id: job,
        claim_id: `k-${job}`,
        classification: 'completed',
        ...(peak !== undefined ? { gpu_peak_mib: peak } : {}),
      }),
      { seq },
    );

  it('folds a record appended while seeding (after the read), skips one the read already had, then follows appends', async () => {
    const tb = await startTestBatch(dir);
    const { manifest } = await loadBatch(tb.store);
    const scripted = scriptedStore(tb.store, [claimed(1, 'a')], (emit) => {
      emit(claimed(1, 'a'), 100); // already in the slice
      emit(claimed(2, 'b'), 200); // appended after the read
      emit(finished(3, 'a', 4096), 300);
    });
    const seeded = await seedLedger(scripted.store, manifest);
    expect(seeded.book.journalSeq).toBe(3);
    expect(seeded.book.open().map((c) => c.job_id)).toEqual(['b']);
    expect(seeded.peaks.byImage().get('roboguide/pair-driver:1')).toEqual([4096]);

    scripted.emit(finished(2, 'b', 1), 150); // older than the ledger: not applied again
    scripted.emit(finished(4, 'b', 'big'), 400); // a peak that is not a number is not noted
    scripted.emit(finished(5, 'ghost', 2048), 500); // a peak for a job outside the manifest is dropped
    expect(seeded.book.journalSeq).toBe(5);
    expect(seeded.book.open()).toEqual([]);
    expect(seeded.peaks.byImage().get('roboguide/pair-driver:1')).toEqual([4096, 1]);
    expect([...seeded.peaks.byImage().keys()]).toEqual(['roboguide/pair-driver:1']);

    seeded.stopFolding();
    expect(scripted.stopped()).toBe(1);
  });

  it('peaks come from the results read at start', async () => {
    const tb = await startTestBatch(dir);
    const receipt = await claimJob(tb, 'a');
    await finishJob(tb, receipt, { outcome: { schema: 'x' } });
    const { manifest } = await loadBatch(tb.store);
    const seeded = await seedLedger(tb.store, manifest);
    // An outcome that does not pass its checks gives no peak.
    expect(seeded.peaks.byImage().size).toBe(0);
    seeded.stopFolding();
  });

  it('a journal that cannot be read stops folding and fails the seeding', async () => {
    const tb = await startTestBatch(dir);
    const { manifest } = await loadBatch(tb.store);
    const scripted = scriptedStore(tb.store, [], () => undefined, true);
    await expect(seedLedger(scripted.store, manifest)).rejects.toThrow('EIO');
    expect(scripted.stopped()).toBe(1);
  });
});
