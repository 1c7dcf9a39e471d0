import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { lstat, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { planEntry } from '../../../src/adapters/archive-entry-plan.js';
import { DEFAULT_EXTRACT_LIMITS, extractArchiveSafely } from '../../../src/adapters/safe-extract.js';
import type { ExtractLimits } from '../../../src/adapters/safe-extract.js';
import {
  failingStream,
  lazyHugeEntry,
  lazyManyFiles,
  tarBytes,
  tarStream,
} from '../../support/hostile-tar.js';

const GIB = 1024 ** 3;
const MIB = 1024 ** 2;

let base: string;
let outside: string;
let target: string;
let outsideBefore: string[];

/** Every path under `base` except the extraction target: what must never change. */
async function listingOutsideTarget(): Promise<string[]> {
  const entries = await readdir(base, { recursive: true });
  return entries.filter((p) => p !== 'target' && !p.startsWith(`target/`)).sort();
}

async function modeOf(path: string): Promise<number> {
  return (await lstat(path)).mode & 0o777;
}

function mapBytes(map: (chunk: Buffer) => Buffer): Transform {
  return new Transform({ transform: (chunk: Buffer, _enc, done) => done(null, map(chunk)) });
}

beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), 'safe-extract-'));
  outside = join(base, 'outside');
  target = join(base, 'target');
  await mkdir(outside);
  await writeFile(join(outside, 'keep.txt'), 'original');
  outsideBefore = await listingOutsideTarget();
});

afterEach(async () => {
  expect(await listingOutsideTarget()).toEqual(outsideBefore);
  expect(await readFile(join(outside, 'keep.txt'), 'utf8')).toBe('original');
  expect(existsSync('/etc/x')).toBe(false);
  await rm(base, { recursive: true, force: true });
});

describe('extractArchiveSafely: normal archives', () => {
  it('extracts nested files byte-exact with private modes, dropping the top-level directory', async () => {
    const rollout = randomBytes(100_000);
    const archive = await tarStream([
      { name: 'sessions/', type: 'directory' },
      { name: 'sessions/2026/', type: 'directory' },
      { name: 'sessions/2026/12/02/rollout-x.jsonl', body: rollout },
      { name: 'sessions/./top.jsonl', body: '{"a":1}\n' },
    ]);
    const report = await extractArchiveSafely(archive, target);
    expect(report).toEqual({ files: 2, bytes: rollout.length + 8, refusals: [], truncated: false });
    expect((await readFile(join(target, '2026/12/02/rollout-x.jsonl'))).equals(rollout)).toBe(true);
    expect(await readFile(join(target, 'top.jsonl'), 'utf8')).toBe('{"a":1}\n');
    for (const dir of ['', '2026', '2026/12', '2026/12/02'])
      expect(await modeOf(join(target, dir))).toBe(0o700);
    for (const file of ['top.jsonl', '2026/12/02/rollout-x.jsonl'])
      expect(await modeOf(join(target, file))).toBe(0o600);
  });

  it('passes every file through a fresh transform', async () => {
    let transforms = 0;
    const archive = await tarStream([
      { name: 'sessions/a.jsonl', body: 'secret sk-abc\n' },
      { name: 'sessions/b.jsonl', body: 'more\n' },
    ]);
    const report = await extractArchiveSafely(archive, target, {
      transform: () => {
        transforms += 1;
        return mapBytes((chunk) => Buffer.from(chunk.toString('latin1').toUpperCase(), 'latin1'));
      },
    });
    expect(report).toMatchObject({ files: 2, refusals: [], truncated: false });
    expect(transforms).toBe(2);
    expect(await readFile(join(target, 'a.jsonl'), 'utf8')).toBe('SECRET SK-ABC\n');
    expect(await readFile(join(target, 'b.jsonl'), 'utf8')).toBe('MORE\n');
  });

  it('passes every name through redactName before creating or refusing it (file, directory, refused link)', async () => {
    const secret = 'Q7vJx2mB9kLp4RtY';
    const archive = await tarStream([
      { name: `sessions/${secret}/`, type: 'directory' },
      { name: `sessions/${secret}/rollout-${secret}.jsonl`, body: 'x' },
      { name: `sessions/link-${secret}`, type: 'symlink', linkname: '/etc/passwd' },
      { name: `sessions/${'a'.repeat(110)}${secret}`, type: 'symlink', linkname: '/etc/passwd' },
    ]);
    const report = await extractArchiveSafely(archive, target, {
      redactName: (name) => name.replaceAll(secret, '[REDACTED]'),
    });
    expect(report.files).toBe(1);
    expect(await readFile(join(target, '[REDACTED]', 'rollout-[REDACTED].jsonl'), 'utf8')).toBe('x');
    // Masked before the label is cut to its 120 chars: no half secret survives the cut.
    expect(report.refusals).toEqual([
      'symlink refused: sessions/link-[REDACTED]',
      `symlink refused: sessions/${'a'.repeat(110)}[…`,
    ]);
    expect(JSON.stringify(report)).not.toContain(secret.slice(0, 8));
  });

  it('never overwrites: a duplicate entry is refused and the first copy kept', async () => {
    const archive = await tarStream([
      { name: 'sessions/a.jsonl', body: 'first' },
      { name: 'sessions/a.jsonl', body: 'second' },
    ]);
    const report = await extractArchiveSafely(archive, target);
    expect(report).toEqual({
      files: 1,
      bytes: 5,
      refusals: ['existing path refused: sessions/a.jsonl'],
      truncated: false,
    });
    expect(await readFile(join(target, 'a.jsonl'), 'utf8')).toBe('first');
  });
});

describe('extractArchiveSafely: hostile names and entry types', () => {
  it('refuses traversal and absolute names and goes on with the rest', async () => {
    const archive = await tarStream([
      { name: '../../etc/x', body: 'pwned' },
      { name: 'sessions/../../outside/x', body: 'pwned' },
      { name: 'sessions/a/../../../outside/keep.txt', body: 'pwned' },
      { name: '/etc/x', body: 'pwned' },
      { name: 'toplevel.jsonl', body: 'no directory to strip' },
      { name: 'sessions/ok.jsonl', body: 'ok' },
    ]);
    const report = await extractArchiveSafely(archive, target);
    expect(report.refusals).toEqual([
      'path traversal refused: ../../etc/x',
      'path traversal refused: sessions/../../outside/x',
      'path traversal refused: sessions/a/../../../outside/keep.txt',
      'absolute path refused: /etc/x',
      'empty name refused: toplevel.jsonl',
    ]);
    expect(report).toMatchObject({ files: 1, truncated: false });
    expect(await readdir(target)).toEqual(['ok.jsonl']);
  });

  it('refuses symlinks, and a later file "through" one lands in a real directory inside', async () => {
    const archive = await tarStream([
      { name: 'sessions/etc', type: 'symlink', linkname: '/etc' },
      { name: 'sessions/etc/x', body: 'pwned' },
      { name: 'sessions/up', type: 'symlink', linkname: '../outside' },
      { name: 'sessions/up/keep.txt', body: 'pwned' },
    ]);
    const report = await extractArchiveSafely(archive, target);
    expect(report.refusals).toEqual(['symlink refused: sessions/etc', 'symlink refused: sessions/up']);
    expect(report.files).toBe(2);
    for (const dir of ['etc', 'up']) expect((await lstat(join(target, dir))).isDirectory()).toBe(true);
    expect(await readFile(join(target, 'up/keep.txt'), 'utf8')).toBe('pwned');
  });

  it('refuses hard links, devices and fifos without creating anything', async () => {
    const archive = await tarStream([
      { name: 'sessions/passwd', type: 'link', linkname: '/etc/passwd' },
      { name: 'sessions/null', type: 'character-device' },
      { name: 'sessions/disk', type: 'block-device' },
      { name: 'sessions/pipe', type: 'fifo' },
    ]);
    const report = await extractArchiveSafely(archive, target);
    expect(report).toEqual({
      files: 0,
      bytes: 0,
      refusals: [
        'hard link refused: sessions/passwd',
        'character-device refused: sessions/null',
        'block-device refused: sessions/disk',
        'fifo refused: sessions/pipe',
      ],
      truncated: false,
    });
    expect(await readdir(target)).toEqual([]);
  });

  it('replaces a half file left by an interrupted collection whole (temp outside the target, fsync, rename)', async () => {
    await mkdir(target, { mode: 0o700 });
    await writeFile(join(target, 'a.jsonl'), '{"half":');
    const archive = await tarStream([{ name: 'sessions/a.jsonl', body: '{"whole":true}\n' }]);
    const report = await extractArchiveSafely(archive, target);
    expect(report).toEqual({ files: 1, bytes: 15, refusals: [], truncated: false });
    expect(await readFile(join(target, 'a.jsonl'), 'utf8')).toBe('{"whole":true}\n');
    expect(await readdir(target)).toEqual(['a.jsonl']);
  });

  it('leaves no temp file anywhere when a file fails its size limit', async () => {
    const archive = await tarStream([{ name: 'sessions/big.jsonl', body: 'x'.repeat(100) }]);
    const limits: ExtractLimits = { ...DEFAULT_EXTRACT_LIMITS, maxFileBytes: 1_000, maxTotalBytes: 1_000 };
    const report = await extractArchiveSafely(archive, target, {
      limits,
      transform: () => mapBytes((c) => Buffer.concat([c, Buffer.alloc(2_000)])),
    });
    expect(report.truncated).toBe(true);
    expect(await readdir(target)).toEqual([]);
    expect(await readdir(base)).toEqual(['outside', 'target']);
  });

  it('never follows a symlink already inside the target', async () => {
    await mkdir(target, { mode: 0o700 });
    await symlink(outside, join(target, 'evil'));
    await symlink(join(outside, 'keep.txt'), join(target, 'evil.jsonl'));
    const archive = await tarStream([
      { name: 'sessions/evil/', type: 'directory' },
      { name: 'sessions/evil/keep.txt', body: 'pwned' },
      { name: 'sessions/evil.jsonl', body: 'pwned' },
    ]);
    const report = await extractArchiveSafely(archive, target);
    expect(report.refusals).toEqual([
      'symlink in path refused: sessions/evil/',
      'symlink in path refused: sessions/evil/keep.txt',
      'existing path refused: sessions/evil.jsonl',
    ]);
    expect(report.files).toBe(0);
  });

  it('plans names without touching the disk', () => {
    expect(planEntry({ name: 'a/b\0c', type: 'file' }, 1)).toEqual({
      kind: 'refuse',
      reason: 'name with NUL refused: a/b?c',
    });
    expect(planEntry({ name: 'a//./b/', type: 'directory' }, 0)).toEqual({
      kind: 'directory',
      segments: ['a', 'b'],
    });
    expect(planEntry({ name: './sessions/', type: 'directory' }, 1)).toEqual({ kind: 'skip' });
    expect(planEntry({ name: `s/${'\u001b'.repeat(200)}`, type: 'symlink' }, 1)).toEqual({
      kind: 'refuse',
      reason: `symlink refused: s/${'?'.repeat(118)}…`,
    });
  });
});

describe('extractArchiveSafely: limits', () => {
  it('stops at maxFiles out of 100k tiny files without generating the rest', async () => {
    const lazy = lazyManyFiles('sessions', 100_000);
    const limits: ExtractLimits = { ...DEFAULT_EXTRACT_LIMITS, maxFiles: 1000 };
    const report = await extractArchiveSafely(lazy.stream, target, { limits });
    expect(report).toMatchObject({
      files: 1000,
      refusals: ['file count limit reached (1000)'],
      truncated: true,
    });
    expect((await readdir(target)).length).toBe(1000);
    expect(lazy.pulled()).toBeLessThan(5000);
  }, 120_000); // 1,000 real files: 1.5 s alone, more than 20 s under CI's load

  it('refuses a 2 GB entry from its header, pulling far less than 2 GB', async () => {
    const lazy = lazyHugeEntry('sessions/huge.jsonl', 2 * GIB);
    const report = await extractArchiveSafely(lazy.stream, target);
    expect(report).toEqual({
      files: 0,
      bytes: 0,
      refusals: [`file too large: sessions/huge.jsonl (${2 * GIB} bytes)`],
      truncated: true,
    });
    expect(lazy.pulled()).toBeLessThan(16 * MIB);
    expect(await readdir(target)).toEqual([]);
  });

  it('stops when the declared total would pass maxTotalBytes', async () => {
    const archive = await tarStream([
      { name: 'sessions/a', body: 'a'.repeat(600) },
      { name: 'sessions/b', body: 'b'.repeat(600) },
      { name: 'sessions/c', body: 'c' },
    ]);
    const limits: ExtractLimits = { ...DEFAULT_EXTRACT_LIMITS, maxTotalBytes: 1000 };
    const report = await extractArchiveSafely(archive, target, { limits });
    expect(report).toEqual({
      files: 1,
      bytes: 600,
      refusals: ['total size limit reached at sessions/b'],
      truncated: true,
    });
    expect(await readdir(target)).toEqual(['a']);
  });

  it('checks the bytes actually written too (an expanding transform) and removes the partial file', async () => {
    const archive = await tarStream([{ name: 'sessions/a', body: 'x'.repeat(80) }]);
    const limits: ExtractLimits = { ...DEFAULT_EXTRACT_LIMITS, maxFileBytes: 100 };
    const transform = (): Transform => mapBytes((chunk) => Buffer.concat([chunk, chunk]));
    const report = await extractArchiveSafely(archive, target, { limits, transform });
    expect(report).toEqual({
      files: 0,
      bytes: 0,
      refusals: ['file too large: sessions/a (written)'],
      truncated: true,
    });
    expect(await readdir(target)).toEqual([]);
  });
});

describe('extractArchiveSafely: failing sources never throw or hang', () => {
  async function completeThenCut(): Promise<Buffer> {
    const bytes = await tarBytes([
      { name: 'sessions/done.jsonl', body: 'complete' },
      { name: 'sessions/cut.jsonl', body: 'z'.repeat(10_000) },
    ]);
    return bytes.subarray(0, 512 * 3 + 4000);
  }

  it('records a source error (the container vanished) and keeps only complete files', async () => {
    const report = await extractArchiveSafely(failingStream(await completeThenCut()), target);
    expect(report).toEqual({
      files: 1,
      bytes: 8,
      refusals: ['archive stream error: ECONNRESET'],
      truncated: true,
    });
    expect(await readdir(target)).toEqual(['done.jsonl']);
  });

  it('records an archive that ends early', async () => {
    const report = await extractArchiveSafely(Readable.from([await completeThenCut()]), target);
    expect(report).toMatchObject({ files: 1, truncated: true });
    expect(report.refusals).toHaveLength(1);
    expect(report.refusals[0]).toMatch(/archive|cut\.jsonl/);
    expect(await readdir(target)).toEqual(['done.jsonl']);
  });

  it('stops on abort in the middle of a file', async () => {
    const lazy = lazyHugeEntry('sessions/huge.jsonl', 2 * GIB);
    const controller = new AbortController();
    let seenBytes = 0;
    const watcher = (): Transform =>
      mapBytes((chunk) => {
        seenBytes += chunk.length;
        if (seenBytes > MIB) controller.abort();
        return chunk;
      });
    const limits: ExtractLimits = { maxFiles: 10, maxFileBytes: 4 * GIB, maxTotalBytes: 4 * GIB };
    const report = await extractArchiveSafely(lazy.stream, target, {
      limits,
      transform: watcher,
      signal: controller.signal,
    });
    expect(report).toEqual({ files: 0, bytes: 0, refusals: ['aborted'], truncated: true });
    expect(lazy.pulled()).toBeLessThan(16 * MIB);
    expect(await readdir(target)).toEqual([]);
  });

  it('returns at once for an already aborted signal, destroying the source', async () => {
    const archive = await tarStream([{ name: 'sessions/a', body: 'a' }]);
    const report = await extractArchiveSafely(archive, target, { signal: AbortSignal.abort() });
    expect(report).toEqual({ files: 0, bytes: 0, refusals: ['aborted'], truncated: true });
    expect(archive.destroyed).toBe(true);
  });

  it('records an unusable target instead of throwing', async () => {
    await writeFile(target, 'not a directory');
    const archive = await tarStream([{ name: 'sessions/a', body: 'a' }]);
    const report = await extractArchiveSafely(archive, join(target, 'sub'), {});
    expect(report).toEqual({ files: 0, bytes: 0, refusals: ['target unusable: ENOTDIR'], truncated: true });
    expect(archive.destroyed).toBe(true);
    expect((await stat(target)).isFile()).toBe(true);
  });
});
