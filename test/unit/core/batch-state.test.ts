import { describe, expect, it } from 'vitest';
import { BatchLedger } from '../../../src/core/batch-ledger.js';
import {
  countJobs,
  deriveState,
  foldJournal,
  JournalFolder,
  type Counts,
  type JournalFold,
} from '../../../src/core/batch-state.js';
import { isKnownJournalType, knownEntry, type JournalEntry } from '../../../src/core/journal-events.js';

const fold = (over: Partial<JournalFold> = {}): JournalFold => ({
  pauseReasons: [],
  stopRequested: false,
  terminateRequested: false,
  exitedAs: null,
  pauseHistory: [],
  ...over,
});
const counts = (pending: number, claimed: number): Counts => ({
  total: 4,
  pending,
  claimed,
  running: 0,
  completed: 4 - pending - claimed,
  infrastructure_failure: 0,
  fatal: 0,
  provider_stop: 0,
  harness_failure: 0,
});

describe('foldJournal', () => {
  it('collects pauses with their history; resume clears all but fatal and inputs_changed', () => {
    const f = foldJournal([
      { type: 'paused', at: 't1', reasons: ['provider'], job_id: 'p1' },
      { type: 'paused', at: 't2', reasons: ['fatal', 'inputs_changed'] },
      { type: 'resumed', at: 't3', cleared: ['provider'], kept: ['fatal', 'inputs_changed'] },
    ]);
    expect(f.pauseReasons).toEqual(['fatal', 'inputs_changed']);
    expect(f.pauseHistory).toEqual([
      { at: 't1', event: 'paused', reasons: ['provider'], job_id: 'p1' },
      { at: 't2', event: 'paused', reasons: ['fatal', 'inputs_changed'], job_id: null },
      { at: 't3', event: 'resumed', reasons: ['provider'], job_id: null },
    ]);
  });

  it('stop and terminate requests hold until the next supervisor starts; its exit state is kept', () => {
    const f = foldJournal([
      { type: 'stop_requested', at: 't1', terminate: false },
      { type: 'stop_requested', at: 't2', terminate: true },
      { type: 'stop_requested', at: 't3', terminate: false },
      { type: 'supervisor_exited', at: 't4', state: 'stopped' },
    ]);
    expect(f).toMatchObject({ stopRequested: true, terminateRequested: true, exitedAs: 'stopped' });
    const after = foldJournal([
      { type: 'stop_requested', at: 't1', terminate: true },
      { type: 'supervisor_exited', at: 't2', state: 'stopped' },
      { type: 'supervisor_started', at: 't3', mode: 'resume', pid: 1, start_ticks: '1', boot_id: 'b' },
    ]);
    expect(after).toMatchObject({ stopRequested: false, terminateRequested: false, exitedAs: null });
  });

  it('reads old and foreign records without a crash: a foreign type, or a field of another type, changes nothing', () => {
    const entries: JournalEntry[] = [
      { type: 'a_record_from_a_newer_version', at: 't0' },
      // A pause without its reasons array (never written by us): ignored, not a crash.
      { type: 'paused', at: 't1', reasons: 'provider' },
      { type: 'stop_requested', at: 't2', terminate: 'yes' },
      { type: 'supervisor_exited', at: 't3', state: 'exploded' },
      // An old record without `at`.
      { type: 'paused', reasons: ['harness'] },
    ];
    const f = foldJournal(entries);
    expect(f.pauseReasons).toEqual(['harness']);
    expect(f.stopRequested).toBe(true);
    expect(f.terminateRequested).toBe(false);
    expect(f.exitedAs).toBeNull();
    expect(f.pauseHistory).toEqual([{ at: '', event: 'paused', reasons: ['harness'], job_id: null }]);
  });

  it('the folder resumes from its saved state (status.json basis) exactly as a full fold', () => {
    const entries: JournalEntry[] = [
      { type: 'paused', at: 't1', reasons: ['provider'] },
      { type: 'stop_requested', at: 't2', terminate: false },
      { type: 'supervisor_exited', at: 't3', state: 'paused' },
    ];
    const first = new JournalFolder();
    first.apply(entries[0] as JournalEntry);
    const resumed = new JournalFolder(first.state());
    for (const e of entries.slice(1)) resumed.apply(e);
    const { pauseHistory: _h1, ...a } = resumed.fold();
    const { pauseHistory: _h2, ...b } = foldJournal(entries);
    expect(a).toEqual(b);
  });
});

describe('deriveState', () => {
  it.each<[string, JournalFold, Counts, boolean, string]>([
    ['every job has a result', fold({ pauseReasons: ['fatal'] }), counts(0, 0), true, 'drained'],
    ['drained even with no supervisor', fold({ stopRequested: true }), counts(0, 0), false, 'drained'],
    ['live, nothing recorded', fold(), counts(2, 1), true, 'running'],
    [
      'live, stop requested',
      fold({ stopRequested: true, pauseReasons: ['provider'] }),
      counts(2, 1),
      true,
      'stopping',
    ],
    ['live, paused', fold({ pauseReasons: ['provider'] }), counts(2, 1), true, 'paused'],
    ['dead, paused', fold({ pauseReasons: ['harness'], exitedAs: 'stopped' }), counts(2, 0), false, 'paused'],
    ['dead, exited stopped', fold({ exitedAs: 'stopped' }), counts(2, 0), false, 'stopped'],
    [
      'dead, stop requested but no exit record',
      fold({ stopRequested: true }),
      counts(2, 0),
      false,
      'stopped',
    ],
    // The supervisor died without a pause or stop on record: fail closed.
    ['dead, nothing recorded', fold(), counts(2, 1), false, 'paused'],
    ['dead, claims left only', fold({ exitedAs: 'drained' }), counts(0, 1), false, 'paused'],
  ])('%s → %s', (_name, f, c, alive, expected) => {
    expect(deriveState(f, c, alive)).toBe(expected);
  });
});

describe('countJobs', () => {
  it('counts pending, claimed without result, and each classification', () => {
    expect(
      countJobs(
        [
          { jobId: 'a', claimed: false, classification: null },
          { jobId: 'b', claimed: true, classification: null },
          { jobId: 'c', claimed: true, classification: 'completed' },
          { jobId: 'd', claimed: true, classification: 'fatal' },
        ],
        1,
      ),
    ).toEqual({
      total: 4,
      pending: 1,
      claimed: 1,
      running: 1,
      completed: 1,
      infrastructure_failure: 0,
      fatal: 1,
      provider_stop: 0,
      harness_failure: 0,
    });
  });
});

describe('the journal union', () => {
  it('knows every type the code appends, and nothing else', () => {
    for (const t of [
      'batch_created',
      'supervisor_started',
      'resumed',
      'paused',
      'stop_requested',
      'supervisor_exited',
      'source_check',
      'reservation_released_unclaimed',
      'recovered',
      'admission_refused',
      'claimed',
      'container_created',
      'pair_placed',
      'harness_fault',
      'pair_finished',
      'reconciled',
      'cleanup_retried',
    ]) {
      expect(isKnownJournalType(t)).toBe(true);
    }
    expect(isKnownJournalType('tick')).toBe(false);
    expect(knownEntry({ type: 'tick', at: 't' })).toBeNull();
    expect(knownEntry({ type: 'paused', at: 't', reasons: [] })).toEqual({
      type: 'paused',
      at: 't',
      reasons: [],
    });
  });

  it('a ledger folds foreign records and old job records without a crash; the old ones leave their job to its files', () => {
    const ledger = BatchLedger.forJobs([
      { job_id: 'a', timeout_seconds: 60 },
      { job_id: 'b', timeout_seconds: 60 },
    ]);
    expect(ledger.apply({ type: 'from_the_future', at: 't', seq: 1, job_id: 'a' } as JournalEntry)).toBe(
      'applied',
    );
    expect(ledger.knows('a')).toBe(false);
    // A claimed record from an older writer (no claimed_at/deadline): the job is unsettled, its files decide.
    expect(ledger.apply({ type: 'claimed', seq: 2, job_id: 'a', claim_id: 'k' })).toBe('applied');
    expect(ledger.unsettled()).toEqual(['a']);
    // A pair_finished without the finish facts: the same.
    ledger.apply({ type: 'claimed', seq: 3, job_id: 'b', claim_id: 'kb', claimed_at: 't', deadline: 't' });
    expect(
      ledger.apply({
        type: 'pair_finished',
        seq: 4,
        job_id: 'b',
        claim_id: 'kb',
        classification: 'completed',
      }),
    ).toBe('applied');
    expect(ledger.unsettled()).toEqual(['a', 'b']);
    // A placement with a node of another type: ignored.
    ledger.apply({ type: 'pair_placed', seq: 5, job_id: 'b', node: 7 });
    expect(ledger.placement('b')).toBeUndefined();
    expect(ledger.journalSeq).toBe(5);
  });

  it('a restored ledger answers unsure to a harness fault it cannot place', () => {
    const full = BatchLedger.forJobs([{ job_id: 'a', timeout_seconds: 60 }]);
    const restored = BatchLedger.restore(full.basis(), () => 0);
    expect(restored.apply({ type: 'harness_fault', seq: 1, job_id: 'a', fault: 'result_write_failed' })).toBe(
      'unsure',
    );
    expect(restored.apply({ type: 'harness_fault', seq: 2, fault: 'result_write_failed' })).toBe('applied');
  });
});
