import { chmod, mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { systemClock } from '../../../../src/adapters/system-clock.js';
import { EvidenceStore } from '../../../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../../../src/adapters/fs/node-file-system.js';
import { RoboguideError } from '../../../../src/core/errors.js';
import { FaultyFileSystem } from '../../../support/faulty-file-system.js';
import type { FaultyFileSystemOptions } from '../../../support/faulty-file-system.js';
import { rawJournalRecord } from '../../../support/raw-journal.js';

/** The store's mechanics take any record. */
const raw = rawJournalRecord;

let tmp: string;
let root: string;

beforeEach(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'rg-store-'));
  root = join(tmp, 'D');
});

afterEach(async () => {
  await rm(tmp, { recursive: true, force: true });
});

async function openStore(
  options: FaultyFileSystemOptions = {},
): Promise<{ fs: FaultyFileSystem; store: EvidenceStore }> {
  const fs = new FaultyFileSystem(new NodeFileSystem(), options);
  await EvidenceStore.createOutputDir(fs, root);
  return { fs, store: new EvidenceStore(fs, root) };
}

async function permissionsOf(path: string): Promise<number> {
  return (await stat(path)).mode & 0o777;
}

async function storeErrorOf(promise: Promise<unknown>): Promise<RoboguideError> {
  const err: unknown = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(RoboguideError);
  return err as RoboguideError;
}

const MUTATIONS = ['open', 'mkdir', 'chmod', 'rename', 'link', 'unlink', 'write'] as const;

describe('EvidenceStore.createOutputDir', () => {
  it('creates a missing output directory private (0700)', async () => {
    await openStore();
    expect(await permissionsOf(root)).toBe(0o700);
    expect(await readdir(root)).toEqual([]);
  });

  it('accepts an existing empty directory and makes it 0700', async () => {
    await mkdir(root);
    await chmod(root, 0o755);
    await openStore();
    expect(await permissionsOf(root)).toBe(0o700);
  });

  it('refuses a non-empty directory with exit 2 and writes nothing', async () => {
    await mkdir(root, { mode: 0o755 });
    await writeFile(join(root, 'keep.txt'), 'old');
    const fs = new FaultyFileSystem(new NodeFileSystem());
    const err = await storeErrorOf(EvidenceStore.createOutputDir(fs, root));
    expect(err.code).toBe('E_OUTPUT_NOT_EMPTY');
    expect(err.exitCode).toBe(2);
    expect(err.context).toMatchObject({ entries: ['keep.txt'] });
    expect(MUTATIONS.map((op) => fs.count(op))).toEqual(MUTATIONS.map(() => 0));
    expect(await readdir(root)).toEqual(['keep.txt']);
    expect(await permissionsOf(root)).toBe(0o755);
  });

  it('refuses a regular file in place of the directory', async () => {
    await writeFile(root, 'x');
    const err = await storeErrorOf(EvidenceStore.createOutputDir(new NodeFileSystem(), root));
    expect(err.code).toBe('E_OUTPUT_NOT_EMPTY');
    expect(await readFile(root, 'utf8')).toBe('x');
  });
});

describe('EvidenceStore atomic replace', () => {
  it('writes JSON 0600 through a temp file, fsyncing file and directory', async () => {
    const { fs, store } = await openStore();
    await store.writeJsonAtomic('status.json', { state: 'running' });
    expect(await store.readJson('status.json')).toEqual({ state: 'running' });
    expect(await permissionsOf(join(root, 'status.json'))).toBe(0o600);
    expect(await readdir(root)).toEqual(['status.json']);
    expect(fs.count('sync', /\.status\.json\.tmp-\d+-[0-9a-f]{16}$/)).toBe(1);
    expect(fs.count('syncDir', root)).toBeGreaterThanOrEqual(1);
  });

  it('keeps the old content when the rename fails (EIO before rename), leaving no temp', async () => {
    const { fs, store } = await openStore();
    await store.writeJsonAtomic('status.json', { v: 1 });
    fs.addRule({ op: 'rename', path: /status\.json$/, when: 'before', code: 'EIO' });
    const err = await storeErrorOf(store.writeJsonAtomic('status.json', { v: 2 }));
    expect(err.code).toBe('E_STORE');
    expect(err.context).toEqual({ path: 'status.json', syscall: 'rename', errno: 'EIO' });
    expect(err.cause).toMatchObject({ code: 'EIO' });
    expect(await store.readJson('status.json')).toEqual({ v: 1 });
    expect(await readdir(root)).toEqual(['status.json']);
  });

  it('has the new content when the rename is done but an error is reported', async () => {
    const { fs, store } = await openStore();
    await store.writeJsonAtomic('status.json', { v: 1 });
    fs.addRule({ op: 'rename', path: /status\.json$/, when: 'after' });
    await expect(store.writeJsonAtomic('status.json', { v: 2 })).rejects.toMatchObject({ code: 'E_STORE' });
    expect(await store.readJson('status.json')).toEqual({ v: 2 });
    expect(await readdir(root)).toEqual(['status.json']);
  });

  it('never tears the target when the temp write hits ENOSPC half way', async () => {
    const { fs, store } = await openStore();
    await store.writeJsonAtomic('status.json', { v: 1, pad: 'a'.repeat(100) });
    fs.addRule({ op: 'write', path: /tmp-/, when: 'partial', partialBytes: 20, code: 'ENOSPC' });
    const err = await storeErrorOf(store.writeJsonAtomic('status.json', { v: 2, pad: 'b'.repeat(100) }));
    expect(err.context).toMatchObject({ syscall: 'write', errno: 'ENOSPC' });
    expect(await store.readJson('status.json')).toEqual({ v: 1, pad: 'a'.repeat(100) });
  });

  it('leaves a temp file after a crash-like failure, which cleanTempFiles removes', async () => {
    const { fs, store } = await openStore();
    await store.ensureDir('jobs/j1');
    await store.writeJsonAtomic('jobs/j1/result.json', { v: 1 });
    fs.addRule({ op: 'rename', path: /result\.json$/ });
    fs.addRule({ op: 'unlink', path: /tmp-/ });
    await expect(store.writeJsonAtomic('jobs/j1/result.json', { v: 2 })).rejects.toThrow(RoboguideError);
    expect(await readdir(join(root, 'jobs/j1'))).toHaveLength(2);
    expect(await store.list('jobs/j1')).toEqual(['result.json']);
    const removed = await store.cleanTempFiles();
    expect(removed).toHaveLength(1);
    expect(removed[0]).toMatch(/^jobs\/j1\/\.result\.json\.tmp-\d+-[0-9a-f]{16}$/);
    expect(await readdir(join(root, 'jobs/j1'))).toEqual(['result.json']);
    expect(await store.readJson('jobs/j1/result.json')).toEqual({ v: 1 });
  });

  it("cleanTempFiles never deletes a pair's own file named like a temp (sessions/, outcome/)", async () => {
    const { store } = await openStore();
    const tempLike = '.rollout.jsonl.tmp-1-0123456789abcdef';
    for (const rel of ['jobs/j1/sessions/2026', 'jobs/j1/outcome', 'sessions', 'outcome']) {
      await store.ensureDir(rel);
      await writeFile(join(root, rel, tempLike), "the pair's bytes");
    }
    await writeFile(join(root, 'jobs/j1', tempLike), 'ours');
    expect(await store.cleanTempFiles()).toEqual([`jobs/j1/${tempLike}`]);
    for (const rel of ['jobs/j1/sessions/2026', 'jobs/j1/outcome', 'sessions', 'outcome']) {
      expect(await readFile(join(root, rel, tempLike), 'utf8')).toBe("the pair's bytes");
    }
  });

  it('writes bytes exactly as given (frozen manifest)', async () => {
    const { store } = await openStore();
    const bytes = new TextEncoder().encode('{ "schema" :\t"x" }\r\n');
    await store.writeBytesAtomic('manifest.json', bytes);
    expect(new Uint8Array(await readFile(join(root, 'manifest.json')))).toEqual(bytes);
  });
});

describe('EvidenceStore.publishExclusive', () => {
  it('publishes once, then reports exists without overwriting', async () => {
    const { store } = await openStore();
    expect(await store.publishExclusive('receipt.json', { attempt: 1 })).toBe('published');
    expect(await store.publishExclusive('receipt.json', { attempt: 2 })).toBe('exists');
    expect(await store.readJson('receipt.json')).toEqual({ attempt: 1 });
    expect(await permissionsOf(join(root, 'receipt.json'))).toBe(0o600);
    expect(await readdir(root)).toEqual(['receipt.json']);
  });

  it('reports a fault after link, yet the target is complete and a re-publish sees it', async () => {
    const { fs, store } = await openStore();
    fs.addRule({ op: 'link', path: /receipt\.json$/, when: 'after' });
    const receipt = { job_id: 'j1', attempt: 1, pad: 'x'.repeat(5000) };
    const err = await storeErrorOf(store.publishExclusive('receipt.json', receipt));
    expect(err.context).toMatchObject({ path: 'receipt.json', syscall: 'link', errno: 'EIO' });
    expect(await store.readJson('receipt.json')).toEqual(receipt);
    expect(await store.publishExclusive('receipt.json', { attempt: 2 })).toBe('exists');
    expect(await store.readJson('receipt.json')).toEqual(receipt);
    expect(await readdir(root)).toEqual(['receipt.json']);
  });

  it('publishes nothing when link fails before it happens', async () => {
    const { fs, store } = await openStore();
    fs.addRule({ op: 'link', when: 'before' });
    await expect(store.publishExclusive('receipt.json', { a: 1 })).rejects.toMatchObject({ code: 'E_STORE' });
    expect(await store.exists('receipt.json')).toBe(false);
    expect(await readdir(root)).toEqual([]);
  });
});

describe('EvidenceStore reads and directories', () => {
  it('reads null for a missing file and E_STORE for corrupt JSON', async () => {
    const { store } = await openStore();
    expect(await store.readJson('nope.json')).toBeNull();
    await writeFile(join(root, 'bad.json'), '{"a":');
    const err = await storeErrorOf(store.readJson('bad.json'));
    expect(err.code).toBe('E_STORE');
    expect(err.context).toMatchObject({ path: 'bad.json', syscall: 'parse' });
  });

  it('creates nested directories 0700, idempotently, and lists them sorted', async () => {
    const { store } = await openStore();
    await store.ensureDir('jobs/b/sessions');
    await store.ensureDir('jobs/a');
    await store.ensureDir('jobs/b/sessions');
    expect(await permissionsOf(join(root, 'jobs'))).toBe(0o700);
    expect(await permissionsOf(join(root, 'jobs/b/sessions'))).toBe(0o700);
    expect(await store.list('jobs')).toEqual(['a', 'b']);
    expect(await store.list('missing')).toEqual([]);
    expect(await store.exists('jobs/a')).toBe(true);
  });

  it('refuses paths that leave the output directory', async () => {
    const { store } = await openStore();
    for (const rel of ['../x.json', '/etc/passwd', 'jobs/../../x', 'a//b']) {
      const err = await storeErrorOf(store.writeJsonAtomic(rel, {}));
      expect(err.context).toMatchObject({ path: rel, syscall: 'resolve' });
    }
    expect(await readdir(tmp)).toEqual(['D']);
  });
});

describe('EvidenceStore journal', () => {
  const journal = (): string => join(root, 'events.jsonl');

  it('appends one fsynced line per record with increasing seq, file 0600', async () => {
    const { fs, store } = await openStore();
    const seqs = [
      await store.appendJournal(raw({ type: 'claimed', at: 't1', job_id: 'a' })),
      await store.appendJournal(raw({ type: 'started', at: 't2', job_id: 'a' })),
      await store.appendJournal(raw({ type: 'finished', at: 't3', job_id: 'a', seq: 99 })),
    ];
    expect(seqs).toEqual([1, 2, 3]);
    expect(fs.count('sync', /events\.jsonl$/)).toBe(3);
    expect(await permissionsOf(journal())).toBe(0o600);
    const records = await store.readJournal();
    expect(records.map((r) => [r.seq, r.type, r.at, (r as Record<string, unknown>)['job_id']])).toEqual([
      [1, 'claimed', 't1', 'a'],
      [2, 'started', 't2', 'a'],
      [3, 'finished', 't3', 'a'],
    ]);
    expect((await readFile(journal(), 'utf8')).split('\n')).toHaveLength(4);
  });

  it('does not interleave concurrent appends, even with short writes', async () => {
    const { store } = await openStore({ maxWriteBytes: 7 });
    const appends = Array.from({ length: 20 }, (_, i) =>
      store.appendJournal(raw({ type: 'tick', at: `t${i}`, payload: String(i).repeat(30) })),
    );
    expect((await Promise.all(appends)).sort((a, b) => a - b)).toEqual(
      Array.from({ length: 20 }, (_, i) => i + 1),
    );
    const records = await store.readJournal();
    expect(records).toHaveLength(20);
    for (const r of records) expect((r as Record<string, unknown>)['payload']).toBe(r.at.slice(1).repeat(30));
  });

  it('ignores a torn last line, then cuts it before the next append', async () => {
    await openStore();
    await writeFile(
      journal(),
      '{"seq":1,"type":"a","at":"t1"}\n{"seq":2,"type":"b","at":"t2"}\n{"seq":3,"ty',
    );
    const store = new EvidenceStore(new NodeFileSystem(), root);
    expect((await store.readJournal()).map((r) => r.seq)).toEqual([1, 2]);
    expect(await store.appendJournal(raw({ type: 'c', at: 't3' }))).toBe(3);
    expect(await readFile(journal(), 'utf8')).toBe(
      '{"seq":1,"type":"a","at":"t1"}\n{"seq":2,"type":"b","at":"t2"}\n{"seq":3,"type":"c","at":"t3"}\n',
    );
  });

  it('counts a complete last record without newline, and terminates it before appending', async () => {
    await openStore();
    await writeFile(journal(), '{"seq":1,"type":"a","at":"t1"}\n{"seq":2,"type":"b","at":"t2"}');
    const store = new EvidenceStore(new NodeFileSystem(), root);
    expect((await store.readJournal()).map((r) => r.seq)).toEqual([1, 2]);
    expect(await store.appendJournal(raw({ type: 'c', at: 't3' }))).toBe(3);
    expect((await store.readJournal()).map((r) => r.type)).toEqual(['a', 'b', 'c']);
  });

  it('rejects corruption before the last line, for reads and appends', async () => {
    await openStore();
    const text = '{"seq":1,"type":"a","at":"t1"}\n{"seq":2,"ty\n{"seq":3,"type":"c","at":"t3"}\n';
    await writeFile(journal(), text);
    const store = new EvidenceStore(new NodeFileSystem(), root);
    const err = await storeErrorOf(store.readJournal());
    expect(err.code).toBe('E_STORE');
    expect(err.message).toContain('line 2');
    await expect(store.appendJournal(raw({ type: 'd', at: 't4' }))).rejects.toMatchObject({
      code: 'E_STORE',
    });
    expect(await readFile(journal(), 'utf8')).toBe(text);
  });

  it('rejects a journal whose seq does not increase', async () => {
    await openStore();
    await writeFile(journal(), '{"seq":2,"type":"a","at":"t1"}\n{"seq":2,"type":"b","at":"t2"}\n');
    await expect(new EvidenceStore(new NodeFileSystem(), root).readJournal()).rejects.toMatchObject({
      code: 'E_STORE',
    });
  });

  it('leaves no partial record when an append hits ENOSPC; the next append continues', async () => {
    const { fs, store } = await openStore();
    await store.appendJournal(raw({ type: 'a', at: 't1' }));
    fs.addRule({ op: 'write', path: /events\.jsonl$/, when: 'partial', partialBytes: 10, code: 'ENOSPC' });
    const err = await storeErrorOf(store.appendJournal(raw({ type: 'b', at: 't2' })));
    expect(err.context).toMatchObject({ path: 'events.jsonl', syscall: 'write', errno: 'ENOSPC' });
    expect(await readFile(journal(), 'utf8')).toBe('{"seq":1,"type":"a","at":"t1"}\n');
    expect(await store.appendJournal(raw({ type: 'c', at: 't3' }))).toBe(2);
    expect((await store.readJournal()).map((r) => r.type)).toEqual(['a', 'c']);
  });

  it('continues seq from the records of an earlier process', async () => {
    const { store } = await openStore();
    await store.appendJournal(raw({ type: 'a', at: 't1' }));
    await store.appendJournal(raw({ type: 'b', at: 't2' }));
    const next = new EvidenceStore(new NodeFileSystem(), root);
    expect(await next.appendJournal(raw({ type: 'c', at: 't3' }))).toBe(3);
    expect(await store.appendJournal(raw({ type: 'd', at: 't4' }))).toBe(4);
    expect((await next.readJournal()).map((r) => r.seq)).toEqual([1, 2, 3, 4]);
  });
});

describe('EvidenceStore.readJson through a check (issue 25)', () => {
  const isNamed = (value: unknown): value is { name: string } =>
    typeof value === 'object' && value !== null && typeof (value as { name?: unknown }).name === 'string';

  it('a file of the wrong shape is E_STORE (parse) naming the file, never a value handed on', async () => {
    const { store } = await openStore();
    await writeFile(join(root, 'a.json'), '{"name": 7}\n');
    const err = await storeErrorOf(store.readJson('a.json', isNamed));
    expect(err.code).toBe('E_STORE');
    expect(err.context).toMatchObject({ path: 'a.json', syscall: 'parse' });
    await writeFile(join(root, 'a.json'), '{"name": "x"}\n');
    expect(await store.readJson('a.json', isNamed)).toEqual({ name: 'x' });
  });

  it('without a check only a JSON object passes: `null`, an array or a string is refused, not read as missing', async () => {
    const { store } = await openStore();
    for (const text of ['null', '[1]', '"x"']) {
      await writeFile(join(root, 'b.json'), text);
      const err = await storeErrorOf(store.readJson('b.json'));
      expect(err.context, text).toMatchObject({ path: 'b.json', syscall: 'parse' });
    }
    expect(await store.readJson('missing.json')).toBeNull();
  });

  it('a zod schema is a check too, and its rule is named', async () => {
    const { z } = await import('zod');
    const { store } = await openStore();
    await writeFile(join(root, 'c.json'), '{"n": "7"}');
    const err = await storeErrorOf(store.readJson('c.json', z.object({ n: z.number() })));
    expect(err.message).toContain('n:');
    await writeFile(join(root, 'c.json'), '{"n": 7}');
    expect(await store.readJson('c.json', z.object({ n: z.number() }))).toEqual({ n: 7 });
  });
});

describe('directory fsyncs that count (issue 26)', () => {
  const exactly = (path: string): RegExp => new RegExp(`^${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`);

  it('two logs opened together: both entries made, then ONE fsync of their folder before any sink is handed out', async () => {
    const { fs, store } = await openStore();
    await store.ensureDir('jobs/j1');
    const before = fs.count('syncDir', exactly(join(root, 'jobs/j1')));
    const [out, err] = await store.openLogs(['jobs/j1/stdout.log', 'jobs/j1/stderr.log'] as const, {
      clock: systemClock,
    });
    expect(fs.count('syncDir', exactly(join(root, 'jobs/j1'))) - before).toBe(1);
    const opens = fs.calls.map((c) => c.op);
    expect(opens.lastIndexOf('open')).toBeLessThan(opens.lastIndexOf('syncDir'));
    out.end('o');
    err.end('e');
    await Promise.all([out.finish(), err.finish()]);
    expect(await readFile(join(root, 'jobs/j1/stdout.log'), 'utf8')).toBe('o');
    expect(await readFile(join(root, 'jobs/j1/stderr.log'), 'utf8')).toBe('e');
  });

  it('a log that cannot be opened fails the group and leaves the other closed', async () => {
    const { fs, store } = await openStore({ rules: [{ op: 'open', path: 'stderr.log', code: 'ENOSPC' }] });
    await store.ensureDir('jobs/j1');
    const err = await storeErrorOf(
      store.openLogs(['jobs/j1/stdout.log', 'jobs/j1/stderr.log'] as const, { clock: systemClock }),
    );
    expect(err.context).toMatchObject({ path: 'jobs/j1/stderr.log', syscall: 'open', errno: 'ENOSPC' });
    expect(fs.count('close')).toBeGreaterThanOrEqual(1);
  });

  it('a group of JSON files: each replaced, one fsync per folder', async () => {
    const { fs, store } = await openStore();
    const before = fs.count('syncDir', exactly(root));
    await store.writeJsonGroup([
      { rel: 'status.json', value: { a: 1 } },
      { rel: 'SUMMARY.json', value: { b: 2 } },
    ]);
    expect(fs.count('syncDir', exactly(root)) - before).toBe(1);
    expect(JSON.parse(await readFile(join(root, 'status.json'), 'utf8'))).toEqual({ a: 1 });
    expect(JSON.parse(await readFile(join(root, 'SUMMARY.json'), 'utf8'))).toEqual({ b: 2 });
  });

  it('writes to one folder that overlap share the next fsync, which starts after every one of their renames', async () => {
    const { fs, store } = await openStore();
    const before = fs.count('syncDir', exactly(root));
    await Promise.all(Array.from({ length: 6 }, (_, i) => store.writeJsonAtomic(`f${i}.json`, { i })));
    const syncs = fs.count('syncDir', exactly(root)) - before;
    expect(syncs).toBeGreaterThanOrEqual(1);
    expect(syncs).toBeLessThan(6);
    // Durable: the last fsync of the folder came after the last rename.
    const ops = fs.calls.map((c) => c.op);
    expect(ops.lastIndexOf('syncDir')).toBeGreaterThan(ops.lastIndexOf('rename'));
  });
});
