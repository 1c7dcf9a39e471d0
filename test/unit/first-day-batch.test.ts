/** Resume of a drained batch, and pinned tags that moved (issue 24). */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { movedImageLine, movedImages } from '../../src/app/batch/image-pins.js';
import { alreadyDrained } from '../../src/app/batch/resume-batch.js';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { rawJournalRecord } from '../support/raw-journal.js';

let dir: string;
let store: EvidenceStore;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-first-day-'));
  store = new EvidenceStore(new NodeFileSystem(), dir);
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const record = (type: string, fields: Record<string, unknown> = {}) =>
  store.appendJournal(rawJournalRecord({ type, at: '2026-12-03T00:00:00.000Z', ...fields }));

describe('alreadyDrained: resume starts no supervisor for a batch with nothing left', () => {
  it('true when the last supervisor exited drained and every job has a result', async () => {
    await record('supervisor_started', { mode: 'start' });
    await record('supervisor_exited', { state: 'drained' });
    await store.writeJsonAtomic('SUMMARY.json', { state: 'drained' });
    expect(await alreadyDrained(store, 0)).toBe(true);
  });

  it('false when the supervisor was killed after journalling its drained exit but before SUMMARY.json', async () => {
    // The crash point journal:supervisor_exited: resume must start a supervisor, which writes SUMMARY.json.
    await record('supervisor_started', { mode: 'start' });
    await record('supervisor_exited', { state: 'drained' });
    expect(await alreadyDrained(store, 0)).toBe(false);
    await store.writeJsonAtomic('SUMMARY.json', { state: 'drained' });
    expect(await alreadyDrained(store, 0)).toBe(true);
  });

  it('false with a job still without a result, after a crash (no exit record) or a stop', async () => {
    await record('supervisor_started', { mode: 'start' });
    expect(await alreadyDrained(store, 0)).toBe(false);
    await record('supervisor_exited', { state: 'stopped' });
    expect(await alreadyDrained(store, 0)).toBe(false);
    await record('supervisor_started', { mode: 'resume' });
    await record('supervisor_exited', { state: 'drained' });
    expect(await alreadyDrained(store, 1)).toBe(false);
  });
});

describe('movedImages: a pinned tag that names another image now', () => {
  const A = `sha256:${'a'.repeat(64)}`;
  const B = `sha256:${'b'.repeat(64)}`;
  it('reports a moved and a vanished tag, not one that still names its pin', async () => {
    const now: Record<string, string | null> = { 'my-eval:1': B, 'gone:1': null, 'same:1': A };
    const moved = await movedImages(
      { images: { 'my-eval:1': A, 'gone:1': A, 'same:1': A } },
      { imageId: (image) => Promise.resolve(now[image] ?? null) },
    );
    expect(moved).toEqual([
      { image: 'my-eval:1', pinned_id: A, current_id: B },
      { image: 'gone:1', pinned_id: A, current_id: null },
    ]);
    expect(moved.map(movedImageLine)).toEqual([
      'image my-eval:1 now names sha256:bbbbbbbbbbbb: this batch keeps running sha256:aaaaaaaaaaaa, the image it had at start',
      'image gone:1 is no longer on the engine: this batch keeps running sha256:aaaaaaaaaaaa, the image it had at start',
    ]);
  });

  it('says nothing without pins, without a runtime that resolves ids, or when the engine does not answer', async () => {
    expect(await movedImages({}, { imageId: () => Promise.resolve(B) })).toEqual([]);
    expect(await movedImages({ images: { 'x:1': A } }, {})).toEqual([]);
    expect(
      await movedImages(
        { images: { 'x:1': A } },
        { imageId: () => Promise.reject(new Error('engine down')) },
      ),
    ).toEqual([]);
  });
});
