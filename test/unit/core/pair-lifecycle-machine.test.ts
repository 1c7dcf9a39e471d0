import { describe, expect, it } from 'vitest';
import { beginLifecycle, decide } from '../../../src/core/pair-lifecycle-machine.js';
import {
  LifecycleTransitionError,
  type CallFailure,
  type Decision,
  type LifecycleEffect,
  type LifecycleEvent,
} from '../../../src/core/pair-lifecycle-state.js';
import type { ReturnedContainer } from '../../../src/core/engine-loss.js';

const T0 = Date.parse('2026-12-03T08:00:00Z');
const DEADLINE = T0 + 60_000;
const fresh = (): Decision => beginLifecycle({ deadlineMs: DEADLINE, stopBudgetSec: 7, reattachTo: null });
const reattached = (): Decision =>
  beginLifecycle({ deadlineMs: DEADLINE, stopBudgetSec: 7, reattachTo: 'c1' });

/** Feeds the events in turn; every decision must ask for exactly one effect until the last. Returns the effects asked. */
function drive(
  start: Decision,
  events: readonly LifecycleEvent[],
): { effects: LifecycleEffect[]; last: Decision } {
  const effects: LifecycleEffect[] = [...start.effects];
  let last = start;
  for (const event of events) {
    expect(last.effects, `an effect is pending before ${event.kind}`).toHaveLength(1);
    last = decide(last.state, event);
    effects.push(...last.effects);
  }
  return { effects, last };
}

const kinds = (effects: readonly LifecycleEffect[]): string[] => effects.map((e) => e.kind);
const engine = (
  fault: 'engine_unavailable' | 'image_missing' | 'port_allocated' | 'engine_error',
  statusCode: number | null = 500,
): CallFailure => ({ kind: 'engine', fault, message: `engine says ${fault}`, statusCode });
const failed = (failure: CallFailure, atMs = T0 + 1_000): LifecycleEvent => ({
  kind: 'failed',
  failure,
  atMs,
});
const container = (
  status: ReturnedContainer['status'],
  finishedAt: string | null = null,
  exitCode: number | null = null,
): ReturnedContainer => ({ status, finishedAt, exitCode });

const UP_TO_WAIT: LifecycleEvent[] = [
  { kind: 'created', containerId: 'c1', atMs: T0 + 100 },
  { kind: 'recorded' },
  { kind: 'attached' },
  { kind: 'started' },
];
/** The collection of a pair whose container exists, each step done. */
const COLLECTED: LifecycleEvent[] = [
  { kind: 'settled' },
  { kind: 'exit_inspected', exit: { exitCode: 0, oomKilled: false } },
  { kind: 'step_done' },
  { kind: 'step_done' },
  { kind: 'step_done' },
  { kind: 'step_done' },
  { kind: 'logs_drained' },
  { kind: 'removed', cleanup: { removed: true, verified_absent: true, attempts: 1 } },
  { kind: 'logs_closed', failure: null },
];
const FULL_COLLECTION = [
  'settle_logs',
  'inspect_exit',
  'collect_mounts',
  'read_outcome',
  'collect_sessions',
  'diagnose',
  'drain_logs',
  'remove',
  'close_logs',
];

describe('the pair lifecycle machine', () => {
  it('runs a pair that exits: create, record, attach, start, wait until the deadline, then every collection step once', () => {
    const { effects, last } = drive(fresh(), [
      ...UP_TO_WAIT,
      { kind: 'wait_ended', end: 'exited', byTerminate: false },
      ...COLLECTED,
    ]);
    expect(kinds(effects)).toEqual([
      'create',
      'record_created',
      'attach',
      'start',
      'wait',
      ...FULL_COLLECTION,
    ]);
    expect(effects).toContainEqual({ kind: 'wait', containerId: 'c1', deadlineMs: DEADLINE });
    expect(effects).toContainEqual({ kind: 'settle_logs', probeChangesOf: 'c1' });
    expect(effects).toContainEqual({ kind: 'inspect_exit', containerId: 'c1', waitForEngine: true });
    expect(effects).toContainEqual({ kind: 'remove', containerId: 'c1', stopBudgetSec: 7 });
    expect(effects).toContainEqual({ kind: 'close_logs', containerExisted: true });
    expect(last.state.at).toEqual({ phase: 'done' });
    expect(last.effects).toEqual([]);
    expect(last.state.facts).toMatchObject({
      containerId: 'c1',
      exitCode: 0,
      timedOut: false,
      terminated: false,
      engineFault: null,
      engineLoss: null,
      cleanup: { removed: true, verified_absent: true, attempts: 1 },
    });
  });

  it("drains the logs before the removal (which destroys the engine's copy) and closes them after it, bounded by the wall budget", () => {
    const reattachedRun: LifecycleEvent[] = [
      { kind: 'followed' },
      { kind: 'unwatched_stop', message: null },
      { kind: 'exited_in_time', exited: true },
    ];
    const freshRun: LifecycleEvent[] = [
      ...UP_TO_WAIT,
      { kind: 'wait_ended', end: 'exited', byTerminate: false },
    ];
    for (const [start, run] of [
      [fresh(), freshRun],
      [reattached(), reattachedRun],
    ] as const) {
      const { effects } = drive(start, [...run, ...COLLECTED]);
      const order = kinds(effects);
      expect(order.indexOf('drain_logs')).toBeGreaterThan(order.indexOf('diagnose'));
      expect(order.indexOf('drain_logs')).toBe(order.indexOf('remove') - 1);
      expect(order.indexOf('close_logs')).toBe(order.indexOf('remove') + 1);
      expect(effects).toContainEqual({ kind: 'drain_logs', containerId: 'c1', deadlineMs: DEADLINE });
    }
  });

  it('the removal waits for the drain: a removal or a close reported before the logs are drained is refused', () => {
    const { last } = drive(fresh(), [
      ...UP_TO_WAIT,
      { kind: 'wait_ended', end: 'exited', byTerminate: false },
      ...COLLECTED.slice(0, 6),
    ]);
    expect(last.effects).toEqual([{ kind: 'drain_logs', containerId: 'c1', deadlineMs: DEADLINE }]);
    expect(() =>
      decide(last.state, { kind: 'removed', cleanup: { removed: true, verified_absent: true, attempts: 1 } }),
    ).toThrow(/no transition from collecting on removed/);
    expect(() => decide(last.state, { kind: 'logs_closed', failure: null })).toThrow(
      /no transition from collecting on logs_closed/,
    );
    expect(decide(last.state, { kind: 'logs_drained' }).effects).toEqual([
      { kind: 'remove', containerId: 'c1', stopBudgetSec: 7 },
    ]);
  });

  it('at the deadline: the controlled stop with the stop budget (SIGTERM, budget, kill), timed out', () => {
    const { effects, last } = drive(fresh(), [
      ...UP_TO_WAIT,
      { kind: 'wait_ended', end: 'deadline', byTerminate: false },
      { kind: 'stopped' },
    ]);
    expect(effects.at(-2)).toEqual({ kind: 'stop', containerId: 'c1', stopBudgetSec: 7, why: 'deadline' });
    expect(last.state.facts).toMatchObject({ timedOut: true, terminated: false });
    expect(last.effects).toEqual([{ kind: 'settle_logs', probeChangesOf: 'c1' }]);
  });

  it('on terminate: the controlled stop, terminated; a stop for a halted log is neither terminated nor timed out', () => {
    const terminated = drive(fresh(), [
      ...UP_TO_WAIT,
      { kind: 'wait_ended', end: 'aborted', byTerminate: true },
    ]);
    expect(terminated.last.effects).toEqual([
      { kind: 'stop', containerId: 'c1', stopBudgetSec: 7, why: 'aborted' },
    ]);
    expect(terminated.last.state.facts).toMatchObject({ terminated: true, timedOut: false });
    const halted = drive(fresh(), [
      ...UP_TO_WAIT,
      { kind: 'wait_ended', end: 'aborted', byTerminate: false },
    ]);
    expect(kinds(halted.last.effects)).toEqual(['stop']);
    expect(halted.last.state.facts).toMatchObject({ terminated: false, timedOut: false });
  });

  it('a stop the engine refuses is an engine fault; the pair stays timed out and the layer changes are not asked', () => {
    const { last } = drive(fresh(), [
      ...UP_TO_WAIT,
      { kind: 'wait_ended', end: 'deadline', byTerminate: false },
      failed(engine('engine_error')),
    ]);
    expect(last.state.facts).toMatchObject({
      timedOut: true,
      engineFault: 'engine_error',
      engineError: { kind: 'engine_error', message: 'engine says engine_error' },
    });
    expect(last.effects).toEqual([{ kind: 'settle_logs', probeChangesOf: null }]);
  });

  it('image missing at create: no container, so only the outcome, the diagnosis and the logs are collected', () => {
    const { effects, last } = drive(fresh(), [
      failed(engine('image_missing', 404)),
      { kind: 'settled' },
      { kind: 'step_done' },
      { kind: 'step_done' },
      { kind: 'logs_closed', failure: null },
    ]);
    expect(kinds(effects)).toEqual(['create', 'settle_logs', 'read_outcome', 'diagnose', 'close_logs']);
    expect(effects).toContainEqual({ kind: 'close_logs', containerExisted: false });
    expect(last.state.facts).toMatchObject({
      containerId: null,
      engineFault: 'image_missing',
      cleanup: { removed: false, verified_absent: true, attempts: 0 },
    });
  });

  it('port allocated at start: an engine fault, and the created container is still removed', () => {
    const { effects, last } = drive(fresh(), [
      ...UP_TO_WAIT.slice(0, 3),
      failed(engine('port_allocated')),
      ...COLLECTED,
    ]);
    expect(kinds(effects)).toEqual(['create', 'record_created', 'attach', 'start', ...FULL_COLLECTION]);
    expect(last.state.facts).toMatchObject({ engineFault: 'port_allocated', containerId: 'c1' });
  });

  it('a create without an answer looks for the container by its claim: found, it is removed; not askable, removal is unverified', () => {
    const found = drive(fresh(), [
      failed(engine('engine_error', null)),
      { kind: 'found', containerId: 'c9', known: true },
    ]);
    expect(kinds(found.effects)).toEqual(['create', 'find_by_claim', 'settle_logs']);
    expect(found.last.state.facts).toMatchObject({ containerId: 'c9', engineFault: 'engine_error' });
    expect(found.last.effects).toEqual([{ kind: 'settle_logs', probeChangesOf: null }]);
    const unknown = drive(fresh(), [
      failed(engine('engine_error', null)),
      { kind: 'found', containerId: null, known: false },
    ]);
    expect(unknown.last.state.facts).toMatchObject({
      containerId: null,
      cleanup: { removed: false, verified_absent: false, attempts: 0 },
    });
    const none = drive(fresh(), [
      failed(engine('engine_error', null)),
      { kind: 'found', containerId: null, known: true },
    ]);
    expect(none.last.state.facts.cleanup).toEqual({ removed: false, verified_absent: true, attempts: 0 });
  });

  it('a failed recording of the container id is a receipt fault, not an engine fault; the container is collected and removed', () => {
    const { effects, last } = drive(fresh(), [UP_TO_WAIT[0]!, failed({ kind: 'receipt' }), ...COLLECTED]);
    expect(kinds(effects)).toEqual(['create', 'record_created', ...FULL_COLLECTION]);
    expect(last.state.facts).toMatchObject({ receiptUpdateFailed: true, engineFault: null });
    expect(effects).toContainEqual({ kind: 'settle_logs', probeChangesOf: 'c1' });
  });

  it('a log file that cannot be opened is the log failure reported, whatever the close says; a close failure alone is reported too', () => {
    const open = drive(fresh(), [
      ...UP_TO_WAIT.slice(0, 2),
      failed({ kind: 'log_open', code: 'ENOSPC' }),
      ...COLLECTED.slice(0, -1),
      { kind: 'logs_closed', failure: 'stdout: EIO' },
    ]);
    expect(open.last.state.facts).toMatchObject({ logFailure: 'open: ENOSPC', engineFault: null });
    const closed = drive(fresh(), [
      ...UP_TO_WAIT,
      { kind: 'wait_ended', end: 'exited', byTerminate: false },
      ...COLLECTED.slice(0, -1),
      { kind: 'logs_closed', failure: 'stdout: EIO' },
    ]);
    expect(closed.last.state.facts.logFailure).toBe('stdout: EIO');
  });

  it('a fault of the tool is an engine_error whose kind names the error, never the engine', () => {
    const { last } = drive(fresh(), [...UP_TO_WAIT, failed({ kind: 'internal', errorKind: 'TypeError' })]);
    expect(last.state.facts).toMatchObject({
      engineFault: 'engine_error',
      engineError: { kind: 'TypeError', message: 'internal error in the pair lifecycle' },
    });
  });

  describe('an engine that goes away', () => {
    const lostInWait: LifecycleEvent[] = [
      ...UP_TO_WAIT,
      { kind: 'engine_lost', lastSeenAliveMs: T0 + 5_000, atMs: T0 + 6_000 },
    ];

    it('is probed until the deadline; a container still running is reconnected and waited for again, with the same deadline', () => {
      const { effects, last } = drive(fresh(), [
        ...lostInWait,
        { kind: 'engine_back', container: container('running'), atMs: T0 + 9_000 },
        { kind: 'logs_reconnected' },
      ]);
      expect(effects.at(-3)).toEqual({ kind: 'await_engine', containerId: 'c1', deadlineMs: DEADLINE });
      expect(effects.at(-2)).toEqual({ kind: 'reconnect_logs', containerId: 'c1', neverStarted: false });
      expect(last.effects).toEqual([{ kind: 'wait', containerId: 'c1', deadlineMs: DEADLINE }]);
      expect(last.state.facts.engineLoss).toBeNull();
    });

    it('stopped while it was away: engine_restarted with the moments and exit code; the reread logs keep their failures', () => {
      const { last } = drive(fresh(), [
        ...lostInWait,
        {
          kind: 'engine_back',
          container: container('exited', '2026-12-03T08:00:08.000Z', 143),
          atMs: T0 + 9_000,
        },
        { kind: 'logs_reconnected' },
      ]);
      expect(last.state.facts.engineLoss).toBe('engine_restarted');
      expect(last.state.facts.engineError?.message).toBe(
        'the engine connection was lost at 2026-12-03T08:00:06.000Z; when the engine answered again (2026-12-03T08:00:09.000Z) the container had been stopped at 2026-12-03T08:00:08.000Z (exit code 143)',
      );
      expect(last.effects).toEqual([{ kind: 'settle_logs', probeChangesOf: null }]);
    });

    it('exited clearly before it was lost: an ordinary exit', () => {
      const { last } = drive(fresh(), [
        ...lostInWait,
        {
          kind: 'engine_back',
          container: container('exited', '2026-12-03T08:00:01.000Z', 0),
          atMs: T0 + 9_000,
        },
        { kind: 'logs_reconnected' },
      ]);
      expect(last.state.facts.engineLoss).toBeNull();
      expect(last.effects).toEqual([{ kind: 'settle_logs', probeChangesOf: 'c1' }]);
    });

    it('gone when it answers: container_vanished; no logs to reconnect, the cut streams are forgiven', () => {
      const { effects, last } = drive(fresh(), [
        ...lostInWait,
        { kind: 'engine_back', container: null, atMs: T0 + 9_000 },
        { kind: 'logs_forgiven' },
      ]);
      expect(kinds(effects).slice(-2)).toEqual(['forgive_cut_logs', 'settle_logs']);
      expect(last.state.facts.engineLoss).toBe('container_vanished');
    });

    it('silent until the deadline: engine_unreachable, cut streams forgiven, collection does not wait for it again', () => {
      const { effects, last } = drive(fresh(), [
        ...lostInWait,
        { kind: 'engine_silent' },
        { kind: 'logs_forgiven' },
        { kind: 'settled' },
      ]);
      expect(kinds(effects).slice(-3)).toEqual(['forgive_cut_logs', 'settle_logs', 'inspect_exit']);
      expect(last.effects).toEqual([{ kind: 'inspect_exit', containerId: 'c1', waitForEngine: false }]);
      expect(last.state.facts).toMatchObject({ engineLoss: 'engine_unreachable', timedOut: false });
      expect(last.state.facts.engineError?.message).toMatch(
        /lost at 2026-12-03T08:00:06.000Z; the engine did not answer again before the pair's deadline/,
      );
    });

    it('a terminate while it is away: the controlled stop, terminated', () => {
      const { last } = drive(fresh(), [
        ...lostInWait,
        { kind: 'wait_ended', end: 'aborted', byTerminate: true },
      ]);
      expect(kinds(last.effects)).toEqual(['stop']);
      expect(last.state.facts).toMatchObject({ terminated: true, engineLoss: null });
    });

    it('lost between create and start: probed from the moment of the create; a never-started container is engine_restarted', () => {
      const { effects, last } = drive(fresh(), [
        ...UP_TO_WAIT.slice(0, 2),
        failed(engine('engine_unavailable', null), T0 + 2_000),
        { kind: 'engine_back', container: container('created'), atMs: T0 + 3_000 },
        { kind: 'logs_reconnected' },
      ]);
      expect(kinds(effects)).toEqual([
        'create',
        'record_created',
        'attach',
        'await_engine',
        'reconnect_logs',
        'settle_logs',
      ]);
      expect(effects).toContainEqual({ kind: 'reconnect_logs', containerId: 'c1', neverStarted: true });
      expect(last.state.facts).toMatchObject({ engineLoss: 'engine_restarted', engineFault: null });
      expect(last.state.facts.engineError?.message).toMatch(/never started/);
      const atStart = drive(fresh(), [...UP_TO_WAIT.slice(0, 3), failed(engine('engine_unavailable', null))]);
      expect(kinds(atStart.last.effects)).toEqual(['await_engine']);
    });

    it('a lost node: node_lost, no outcome folder to copy back, nothing waited for', () => {
      const { effects, last } = drive(fresh(), [
        ...UP_TO_WAIT,
        { kind: 'node_lost', message: 'node n2 lost' },
        { kind: 'logs_forgiven' },
        ...COLLECTED.slice(0, 1),
        COLLECTED[1]!,
        ...COLLECTED.slice(3),
      ]);
      expect(kinds(effects)).toEqual([
        'create',
        'record_created',
        'attach',
        'start',
        'wait',
        'forgive_cut_logs',
        'settle_logs',
        'inspect_exit',
        'read_outcome',
        'collect_sessions',
        'diagnose',
        'drain_logs',
        'remove',
        'close_logs',
      ]);
      expect(effects).toContainEqual({ kind: 'inspect_exit', containerId: 'c1', waitForEngine: false });
      expect(effects).toContainEqual({
        kind: 'collect_sessions',
        containerId: 'c1',
        engineLoss: 'node_lost',
      });
      expect(last.state.facts).toMatchObject({
        engineLoss: 'node_lost',
        engineError: { kind: 'node_lost', message: 'node n2 lost' },
      });
    });
  });

  describe('a reattach (resume)', () => {
    it('follows the logs, checks for an unwatched stop, and does not wait for a container that exited in time', () => {
      const { effects, last } = drive(reattached(), [
        { kind: 'followed' },
        { kind: 'unwatched_stop', message: null },
        { kind: 'exited_in_time', exited: true },
      ]);
      expect(effects.slice(0, 3)).toEqual([
        { kind: 'follow', containerId: 'c1' },
        { kind: 'check_unwatched_stop', containerId: 'c1', deadlineMs: DEADLINE },
        { kind: 'check_exited_in_time', containerId: 'c1', deadlineMs: DEADLINE },
      ]);
      expect(kinds(last.effects)).toEqual(['settle_logs']);
      expect(last.state.facts.timedOut).toBe(false);
    });

    it('waits for a container still running until the original deadline', () => {
      const { last } = drive(reattached(), [
        { kind: 'followed' },
        { kind: 'unwatched_stop', message: null },
        { kind: 'exited_in_time', exited: false },
      ]);
      expect(last.effects).toEqual([{ kind: 'wait', containerId: 'c1', deadlineMs: DEADLINE }]);
    });

    it('a stop by an engine restart nobody watched is engine_restarted', () => {
      const { last } = drive(reattached(), [
        { kind: 'followed' },
        { kind: 'unwatched_stop', message: 'stopped by a restart' },
        { kind: 'exited_in_time', exited: true },
      ]);
      expect(last.state.facts).toMatchObject({
        engineLoss: 'engine_restarted',
        engineError: { kind: 'engine_restarted', message: 'stopped by a restart' },
      });
      expect(last.effects).toEqual([{ kind: 'settle_logs', probeChangesOf: null }]);
    });

    it('a follow the engine refuses is an engine fault (not a loss to wait through)', () => {
      const { last } = drive(reattached(), [failed(engine('engine_unavailable', null))]);
      expect(last.state.facts).toMatchObject({ engineFault: 'engine_unavailable', engineLoss: null });
      expect(kinds(last.effects)).toEqual(['settle_logs']);
    });
  });

  it('a wait the engine fails is an engine fault; collection and removal still run', () => {
    const { effects } = drive(fresh(), [...UP_TO_WAIT, failed(engine('engine_error')), ...COLLECTED]);
    expect(kinds(effects).slice(5)).toEqual(FULL_COLLECTION);
  });

  it('refuses events that do not belong to the phase (a fault of the loop that feeds it)', () => {
    expect(() => decide(fresh().state, { kind: 'started' })).toThrow(LifecycleTransitionError);
    const collecting = drive(fresh(), [
      ...UP_TO_WAIT,
      { kind: 'wait_ended', end: 'exited', byTerminate: false },
      { kind: 'settled' },
    ]).last;
    expect(() =>
      decide(collecting.state, {
        kind: 'removed',
        cleanup: { removed: true, verified_absent: true, attempts: 1 },
      }),
    ).toThrow(/no transition from collecting on removed/);
    expect(() => decide(collecting.state, failed(engine('engine_error')))).toThrow(LifecycleTransitionError);
    for (const event of [
      { kind: 'recorded' },
      { kind: 'attached' },
      { kind: 'followed' },
      { kind: 'unwatched_stop', message: null },
      { kind: 'exited_in_time', exited: true },
      { kind: 'wait_ended', end: 'exited', byTerminate: false },
      { kind: 'engine_lost', lastSeenAliveMs: 0, atMs: 0 },
      { kind: 'node_lost', message: '' },
      { kind: 'engine_back', container: null, atMs: 0 },
      { kind: 'engine_silent' },
      { kind: 'logs_reconnected' },
      { kind: 'logs_forgiven' },
      { kind: 'stopped' },
      { kind: 'found', containerId: null, known: true },
      { kind: 'settled' },
      { kind: 'step_done' },
    ] as LifecycleEvent[]) {
      expect(() => decide(fresh().state, event), event.kind).toThrow(LifecycleTransitionError);
    }
  });
});
