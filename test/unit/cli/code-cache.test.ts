import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { commandKey } from '../../../src/cli/code-cache.js';

/**
 * The bundle's code cache (src/cli/code-cache.ts), each run in a Node process of its own (it replaces how CommonJS is
 * compiled in the whole process): the source file itself, loaded by Node's type stripping.
 */
const SOURCE = join(import.meta.dirname, '../../../src/cli/code-cache.ts');

let dir: string;
let bundle: string;
let cache: string;

/** A function with enough statements that its bytecode shows in the cache's size once it has run. */
function bigFunction(): string {
  const lines = Array.from({ length: 400 }, (_, i) => `  total += (i * ${i + 1}) % ${i + 7};`);
  return `exports.work = function work() {\n  let total = 0;\n  for (let i = 0; i < 3; i++) {\n${lines.join('\n')}\n  }\n  return total;\n};\n`;
}

function writeBundle(value = 21): void {
  mkdirSync(join(bundle, 'chunks'), { recursive: true });
  writeFileSync(
    join(bundle, 'chunks', 'b.cjs'),
    '"use strict";\nexports.twice = function twice(n) { return n * 2; };\n',
  );
  writeFileSync(
    join(bundle, 'entry.cjs'),
    [
      '"use strict";',
      "const b = require('./chunks/b.cjs');",
      `exports.value = b.twice(${value});`,
      'exports.file = __filename;',
      "exports.resolved = require.resolve('./chunks/b.cjs');",
      'exports.strict = (function () { return this === undefined; })();',
      bigFunction(),
    ].join('\n'),
  );
}

interface Run {
  code: number | null;
  out: {
    installed: boolean;
    stats?: { hits: number; misses: number };
    value: number;
    file: string;
    resolved: string;
    strict: boolean;
    outside: number;
  };
  stderr: string;
}

function run(key: string, options: { call?: boolean; exit?: number; cacheDir?: string } = {}): Run {
  const runner = join(dir, 'runner.mjs');
  writeFileSync(
    runner,
    [
      `import { installCodeCache } from ${JSON.stringify(SOURCE)};`,
      "import { createRequire } from 'node:module';",
      'const [bundleDir, cacheDir, key, call, exit, outside] = process.argv.slice(2);',
      'const cache = installCodeCache({ bundleDir, cacheDir, key });',
      'const require = createRequire(import.meta.url);',
      "const mod = require(bundleDir + 'entry.cjs');",
      "if (call === 'call') mod.work();",
      'const other = require(outside);',
      'process.stdout.write(JSON.stringify({ installed: cache !== null, stats: cache?.stats, value: mod.value, file: mod.file, resolved: mod.resolved, strict: mod.strict, outside: other.outside }));',
      'process.exitCode = Number(exit);',
    ].join('\n'),
  );
  const outside = join(dir, 'outside.cjs');
  writeFileSync(outside, 'exports.outside = 7;\n');
  const r = spawnSync(
    process.execPath,
    [
      '--no-warnings',
      runner,
      `${bundle}/`,
      options.cacheDir ?? cache,
      key,
      options.call === true ? 'call' : 'no',
      String(options.exit ?? 0),
      outside,
    ],
    { encoding: 'utf8', timeout: 30_000 },
  );
  return { code: r.status, out: JSON.parse(r.stdout || '{}') as Run['out'], stderr: r.stderr };
}

/** The cache files of `key`. */
function filesOf(key: string): string[] {
  return readdirSync(cache)
    .filter((f) => f.startsWith(`${key}.`))
    .sort();
}

/** The cache file of `key` that holds the entry's code (the larger of the two, by its source's hash). */
function entryFile(key: string): string {
  const hash = createHash('sha1')
    .update(readFileSync(join(bundle, 'entry.cjs')))
    .digest();
  const file = filesOf(key).find((f) => readFileSync(join(cache, f)).subarray(0, 20).equals(hash));
  if (file === undefined) throw new Error(`no cache file of ${key} holds the entry's source`);
  return join(cache, file);
}

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'rg-code-cache-'));
  bundle = join(dir, 'bundle');
  cache = join(dir, 'cache');
  writeBundle();
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('the bundle compiled with the code of an earlier run (issue 39)', () => {
  it('a first run that succeeds writes one file per bundle file (0600, in a 0700 folder); the next run takes them', () => {
    const first = run('pair-run');
    expect(first.code, first.stderr).toBe(0);
    expect(first.out).toMatchObject({
      installed: true,
      stats: { hits: 0, misses: 2 },
      value: 42,
      strict: true,
      outside: 7,
    });
    // Compiled as Node would: its own file name, a require that resolves beside it, strict mode kept.
    expect(first.out.file).toBe(join(bundle, 'entry.cjs'));
    expect(first.out.resolved).toBe(join(bundle, 'chunks', 'b.cjs'));
    expect(filesOf('pair-run')).toHaveLength(2);
    expect(statSync(cache).mode & 0o777).toBe(0o700);
    for (const f of filesOf('pair-run')) expect(statSync(join(cache, f)).mode & 0o777).toBe(0o600);
    // Only the bundle's files: the module outside it has none.
    expect(readdirSync(cache)).toHaveLength(2);

    const second = run('pair-run');
    expect(second.code, second.stderr).toBe(0);
    expect(second.out).toMatchObject({ stats: { hits: 2, misses: 0 }, value: 42, strict: true });
  });

  it('holds what the run compiled, not only the top level: the run that called a function leaves it in the cache', () => {
    expect(run('loaded-only').code).toBe(0);
    expect(run('called', { call: true }).code).toBe(0);
    const loadedOnly = statSync(entryFile('loaded-only')).size;
    const called = statSync(entryFile('called')).size;
    // The function's bytecode (400 statements) is in the second file and not the first.
    expect(called - loadedOnly).toBeGreaterThan(4_000);
  });

  it('writes nothing after a run that failed (its few functions would stand for the command)', () => {
    const r = run('pair-run', { exit: 2 });
    expect(r.code).toBe(2);
    expect(r.out.value).toBe(42);
    expect(readdirSync(cache)).toEqual([]);
  });

  it('a new build of the same length is compiled afresh and its file replaced: code of another source never runs', () => {
    expect(run('pair-run').code).toBe(0);
    const before = readFileSync(entryFile('pair-run'));
    // 21 -> 22: the same length, which is all V8's own check of cached data compares.
    writeBundle(22);
    const r = run('pair-run');
    expect(r.out).toMatchObject({ value: 44, stats: { hits: 1, misses: 1 } });
    expect(readFileSync(entryFile('pair-run')).equals(before)).toBe(false);
    expect(filesOf('pair-run')).toHaveLength(2);
    expect(run('pair-run').out).toMatchObject({ value: 44, stats: { hits: 2, misses: 0 } });
  });

  it('damaged data under the right source hash (bytes flipped: V8 would run them and crash) is never given to V8: compiled afresh and written again', () => {
    expect(run('pair-run').code).toBe(0);
    const file = entryFile('pair-run');
    const bytes = readFileSync(file);
    // Past V8's own header (which it does check): 64 bytes at each of three places in its data.
    for (const share of [0.5, 0.7, 0.9]) {
      const from = Math.floor(bytes.length * share);
      for (let at = from; at < from + 64 && at < bytes.length; at++) bytes[at] = bytes[at]! ^ 0x5a;
    }
    writeFileSync(file, bytes);
    const r = run('pair-run');
    expect(r.code, r.stderr).toBe(0);
    expect(r.out).toMatchObject({ value: 42, stats: { hits: 1, misses: 1 } });
    expect(run('pair-run').out).toMatchObject({ value: 42, stats: { hits: 2, misses: 0 } });
  });

  it('data V8 refuses (corrupt, under the right hash) is a compile without it, and is written again', () => {
    expect(run('pair-run').code).toBe(0);
    const file = entryFile('pair-run');
    const bytes = readFileSync(file);
    writeFileSync(file, Buffer.concat([bytes.subarray(0, 20), Buffer.alloc(bytes.length - 20, 0x5a)]));
    const r = run('pair-run');
    expect(r.code, r.stderr).toBe(0);
    expect(r.out).toMatchObject({ value: 42, stats: { hits: 1, misses: 1 } });
    expect(run('pair-run').out).toMatchObject({ value: 42, stats: { hits: 2, misses: 0 } });
  });

  it('a cache file that is a link is never read (O_NOFOLLOW), and the link itself is replaced, not its target', () => {
    expect(run('pair-run').code).toBe(0);
    const file = entryFile('pair-run');
    const target = join(dir, 'elsewhere');
    writeFileSync(target, readFileSync(file));
    rmSync(file);
    symlinkSync(target, file);
    const r = run('pair-run');
    expect(r.out).toMatchObject({ value: 42, stats: { hits: 1, misses: 1 } });
    expect(statSync(file, { throwIfNoEntry: true }).isFile()).toBe(true);
    expect(readFileSync(target).equals(readFileSync(file))).toBe(false);
  });

  it('a cache folder that is a link, open to others, not a folder, or in a folder others can write is not used: the bundle loads as Node loads it', () => {
    const real = join(dir, 'real');
    mkdirSync(real, { mode: 0o700 });
    const linked = join(dir, 'linked');
    symlinkSync(real, linked);
    const open = join(dir, 'open');
    mkdirSync(open);
    chmodSync(open, 0o777);
    const file = join(dir, 'a-file');
    writeFileSync(file, '');
    // Inside a folder others can write (a shared NODE_COMPILE_CACHE): they could swap ours after it was checked.
    // (Straight under the sticky /tmp, where others reach it: one inside our own 0700 folder would be out of their reach.)
    const shared = mkdtempSync(join(tmpdir(), 'rg-code-cache-shared-'));
    chmodSync(shared, 0o777);
    const inShared = join(shared, 'roboguide-bundle');
    for (const cacheDir of [linked, open, file, inShared]) {
      const r = run('pair-run', { cacheDir });
      expect(r.code, cacheDir).toBe(0);
      expect(r.out, cacheDir).toMatchObject({ installed: false, value: 42 });
    }
    expect(readdirSync(real)).toEqual([]);
    expect(readdirSync(open)).toEqual([]);
    expect(readdirSync(shared)).toEqual([]);
    rmSync(shared, { recursive: true, force: true });
  });

  it("a folder others may write is fine inside one of ours they cannot enter (Node's version folder under umask 002)", () => {
    const sealed = join(dir, 'sealed');
    mkdirSync(sealed, { mode: 0o700 });
    const groupWritable = join(sealed, 'v24-x64');
    mkdirSync(groupWritable);
    chmodSync(groupWritable, 0o775);
    const r = run('pair-run', { cacheDir: join(groupWritable, 'roboguide-bundle') });
    expect(r.out).toMatchObject({ installed: true, value: 42 });
    expect(readdirSync(join(groupWritable, 'roboguide-bundle'))).toHaveLength(2);
  });
});

describe('commandKey', () => {
  it("is the command's first two words; a flag, a path or capitals end it; none is null", () => {
    expect(commandKey(['pair', 'run', '--spec', 'x'])).toBe('pair-run');
    expect(commandKey(['e1-batch', 'start', 'manifest.json'])).toBe('e1-batch-start');
    expect(commandKey(['doctor', '--json'])).toBe('doctor');
    expect(commandKey(['status'])).toBe('status');
    expect(commandKey(['--help'])).toBeNull();
    expect(commandKey(['../x'])).toBeNull();
    expect(commandKey(['Pair', 'run'])).toBeNull();
    expect(commandKey([])).toBeNull();
    expect(commandKey(['a'.repeat(65)])).toBeNull();
  });
});
