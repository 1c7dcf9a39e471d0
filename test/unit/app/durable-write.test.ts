import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../../src/adapters/fs/node-file-system.js';
import { writeJsonVerified } from '../../../src/app/durable-write.js';
import { FaultyFileSystem, type FaultRule } from '../../support/faulty-file-system.js';

let root: string;
const VALUE = { schema: 'x/v1', classification: 'completed', n: 1 };

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'rg-durable-'));
});

afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

function storeWith(...rules: FaultRule[]): { fs: FaultyFileSystem; store: EvidenceStore } {
  const fs = new FaultyFileSystem(new NodeFileSystem(), { rules });
  return { fs, store: new EvidenceStore(fs, root) };
}

async function onDisk(): Promise<unknown> {
  return JSON.parse(await readFile(join(root, 'result.json'), 'utf8'));
}

/** Every unlink touched a temp file of ours, never the target. */
function onlyTempsUnlinked(fs: FaultyFileSystem): boolean {
  return fs.calls
    .filter((c) => c.op === 'unlink')
    .every((c) => c.paths.every((p) => /\/\.result\.json\.tmp-/.test(p)));
}

function nested(depth: number): unknown {
  let value: unknown = 0;
  for (let i = 0; i < depth; i++) value = [value];
  return value;
}

describe('writeJsonVerified', () => {
  it('never throws for a value too deep to encode (5,000 levels): failed, nothing written', async () => {
    const { fs, store } = storeWith();
    const written = await writeJsonVerified(store, 'result.json', { outcome: nested(5_000) });
    expect(written).toMatchObject({ kind: 'failed', attempts: 0, error: { code: 'E_STORE' } });
    expect(await readdir(root)).toEqual([]);
    expect(fs.count('open')).toBe(0);
  });

  it('treats a read-back too deep to compare as other content, without throwing', async () => {
    const deep = `${'['.repeat(5_000)}${']'.repeat(5_000)}`;
    // A foreign, very deep file at the target, and a write whose rename fails: the read-back must not overflow.
    await writeFile(join(root, 'result.json'), deep);
    const { store } = storeWith({ op: 'rename', when: 'before', times: 2 });
    expect((await writeJsonVerified(store, 'result.json', VALUE)).kind).toBe('failed');
    expect(await readFile(join(root, 'result.json'), 'utf8')).toBe(deep);
  });

  it('writes once when nothing fails', async () => {
    const { fs, store } = storeWith();
    expect(await writeJsonVerified(store, 'result.json', VALUE)).toEqual({ kind: 'written', attempts: 1 });
    expect(await onDisk()).toEqual(VALUE);
    expect(fs.count('rename')).toBe(1);
  });

  it('retries once when the write failed before the rename (file missing)', async () => {
    const { fs, store } = storeWith({ op: 'rename', path: 'result.json', when: 'before' });
    expect(await writeJsonVerified(store, 'result.json', VALUE)).toEqual({ kind: 'written', attempts: 2 });
    expect(await onDisk()).toEqual(VALUE);
    expect(onlyTempsUnlinked(fs)).toBe(true);
  });

  it('reads back and stops when the rename happened but an error was reported', async () => {
    const { fs, store } = storeWith({ op: 'rename', path: 'result.json', when: 'after' });
    const outcome = await writeJsonVerified(store, 'result.json', VALUE);
    expect(outcome.kind).toBe('verified_after_error');
    expect(outcome.attempts).toBe(1);
    expect(fs.count('rename')).toBe(1);
    expect(await onDisk()).toEqual(VALUE);
  });

  it('reads back and stops when only the directory fsync failed', async () => {
    const { store } = storeWith({ op: 'syncDir', when: 'before', code: 'EIO' });
    expect((await writeJsonVerified(store, 'result.json', VALUE)).kind).toBe('verified_after_error');
  });

  it('fails without throwing or deleting after two consecutive failures', async () => {
    const { fs, store } = storeWith({
      op: 'rename',
      path: 'result.json',
      when: 'before',
      times: 2,
      code: 'ENOSPC',
    });
    const outcome = await writeJsonVerified(store, 'result.json', VALUE);
    expect(outcome.kind).toBe('failed');
    expect(outcome.attempts).toBe(2);
    expect(outcome.kind === 'failed' && outcome.error.code).toBe('E_STORE');
    expect(outcome.kind === 'failed' && outcome.error.message).toContain('ENOSPC');
    expect(await readdir(root)).toEqual([]);
    expect(onlyTempsUnlinked(fs)).toBe(true);
  });

  it('does not retry when retries is 0', async () => {
    const { fs, store } = storeWith({ op: 'rename', path: 'result.json', when: 'before' });
    expect((await writeJsonVerified(store, 'result.json', VALUE, { retries: 0 })).kind).toBe('failed');
    expect(fs.count('rename')).toBe(1);
  });

  it('retries over the named previous (launch-state) content', async () => {
    const previous = { schema: 'x/v1', state: 'launched' };
    await new EvidenceStore(new NodeFileSystem(), root).writeJsonAtomic('result.json', previous);
    const { store } = storeWith({ op: 'rename', path: 'result.json', when: 'before' });
    expect(await writeJsonVerified(store, 'result.json', VALUE, { previous })).toEqual({
      kind: 'written',
      attempts: 2,
    });
    expect(await onDisk()).toEqual(VALUE);
  });

  it('leaves other content untouched and fails', async () => {
    const other = { schema: 'x/v1', classification: 'fatal' };
    await new EvidenceStore(new NodeFileSystem(), root).writeJsonAtomic('result.json', other);
    const { fs, store } = storeWith({ op: 'rename', path: 'result.json', when: 'before' });
    const outcome = await writeJsonVerified(store, 'result.json', VALUE, { previous: { state: 'launched' } });
    expect(outcome.kind).toBe('failed');
    expect(outcome.kind === 'failed' && outcome.error.message).toContain('other content');
    expect(fs.count('rename')).toBe(1);
    expect(await onDisk()).toEqual(other);
  });
});
