import { appendFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../../../src/app/evidence/evidence-store.js';
import { JOURNAL_FILE } from '../../../../src/core/evidence-names.js';
import type { JournalRecord } from '../../../../src/core/journal-events.js';
import { NodeFileSystem } from '../../../../src/adapters/fs/node-file-system.js';
import { CoalescingWriter } from '../../../../src/app/batch/status-writer.js';
import { clockAt, fakeTime } from '../../../support/fake-time.js';
import { rawJournalRecord } from '../../../support/raw-journal.js';

/** The store's mechanics take any record. */
const raw = rawJournalRecord;

/** The pieces incremental status stands on: the coalescing status writer and the journal read from an offset. */
describe('CoalescingWriter', () => {
  const clock = clockAt(() => new Date(0)); // time never advances: every later soon() must wait for the interval

  it('coalesces requests made while a write waits, and every write builds the newest state', async () => {
    let state = 0;
    const written: number[] = [];
    const w = new CoalescingWriter(() => Promise.resolve(void written.push(state)), clock, 60_000);
    state = 1;
    const first = w.now();
    state = 2;
    const second = w.now(); // queued behind nothing new: joins the first, which has not started yet
    await Promise.all([first, second]);
    expect(written).toEqual([2]);
    state = 3;
    w.soon(); // the interval has not passed: scheduled, not written
    w.soon();
    await Promise.resolve();
    expect(written).toEqual([2]);
    state = 4;
    await w.now(); // a change that matters: written at once, the scheduled one folded into it
    expect(written).toEqual([2, 4]);
    await w.close();
    await w.now();
    w.soon();
    expect(written).toEqual([2, 4]);
  });

  it('a failed write goes to onError, never to the caller', async () => {
    const errors: unknown[] = [];
    const w = new CoalescingWriter(
      () => Promise.reject(new Error('ENOSPC')),
      clock,
      0,
      (err) => errors.push(err),
    );
    await expect(w.now()).resolves.toBeUndefined();
    expect(errors).toHaveLength(1);
    await w.close();
  });
});

describe('CoalescingWriter on the injected clock', () => {
  it('a scheduled write happens when the fake clock reaches it, with no real time passing', async () => {
    const time = fakeTime();
    const written: number[] = [];
    const w = new CoalescingWriter(
      () => Promise.resolve(void written.push(time.nowMs())),
      time.clock,
      60_000,
      () => undefined,
    );
    const t0 = time.nowMs();
    await w.now();
    w.soon(); // within the interval: scheduled on the clock's timer, a minute away
    w.soon();
    expect(time.pending()).toBe(1);
    time.advance(59_999);
    await Promise.resolve();
    expect(written).toEqual([t0]); // not due yet
    time.advance(1);
    await Promise.resolve();
    await Promise.resolve();
    expect(written).toEqual([t0, t0 + 60_000]); // due: written once for both requests
    expect(time.pending()).toBe(0);
    w.soon();
    expect(time.pending()).toBe(1);
    await w.now(); // a change that matters: written at once, the scheduled write cancelled
    expect(time.pending()).toBe(0);
    expect(written).toEqual([t0, t0 + 60_000, t0 + 60_000]);
    await w.close();
  });
});

describe('EvidenceStore journal offsets', () => {
  let dir: string;
  let store: EvidenceStore;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-journal-from-'));
    store = new EvidenceStore(new NodeFileSystem(), dir);
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('tells listeners of each durable record with the offset past it, and reads on from such an offset', async () => {
    const seen: [JournalRecord, number][] = [];
    const stop = store.onJournalAppend((record, endBytes) => seen.push([record, endBytes]));
    await store.appendJournal(raw({ type: 'a', at: 't' }));
    await store.appendJournal(raw({ type: 'b', at: 't', n: 1 }));
    stop();
    await store.appendJournal(raw({ type: 'c', at: 't' }));
    expect(seen.map(([r]) => [r.seq, r.type])).toEqual([
      [1, 'a'],
      [2, 'b'],
    ]);
    const slice = await store.readJournalSlice();
    expect(slice.records.map((r) => r.seq)).toEqual([1, 2, 3]);
    const fromFirst = await store.readJournalFrom(seen[0]![1]);
    expect(fromFirst?.records.map((r) => r.type)).toEqual(['b', 'c']);
    expect(fromFirst?.endBytes).toBe(slice.endBytes);
    expect((await store.readJournalFrom(slice.endBytes))?.records).toEqual([]);
  });

  it('a torn last line is not read past; an offset beyond the end or inside a line gives null', async () => {
    await store.appendJournal(raw({ type: 'a', at: 't' }));
    const { endBytes } = await store.readJournalSlice();
    await appendFile(join(dir, JOURNAL_FILE), '{"seq":2,"type":"b","at');
    expect(await store.readJournalFrom(endBytes)).toEqual({ records: [], endBytes });
    expect(await store.readJournalFrom(endBytes + 1_000)).toBeNull();
    expect(await store.readJournalFrom(3)).toBeNull();
  });

  it('a throwing listener never fails the append of a durable record', async () => {
    store.onJournalAppend(() => {
      throw new Error('listener bug');
    });
    await expect(store.appendJournal(raw({ type: 'a', at: 't' }))).resolves.toBe(1);
  });
});
