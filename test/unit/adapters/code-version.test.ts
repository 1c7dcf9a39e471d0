import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BUILD_INFO_FILE, checkoutState, readCodeVersion } from '../../../src/adapters/code-version.js';

let dir: string;

/** A package folder (package.json at `version`) at `at`. */
function packageAt(at: string, version = '1.2.3'): string {
  mkdirSync(at, { recursive: true });
  writeFileSync(join(at, 'package.json'), JSON.stringify({ name: 'p', version }));
  return at;
}

function git(at: string, ...args: string[]): string {
  return execFileSync('git', ['-C', at, '-c', 'user.name=t', '-c', 'user.email=t@t', ...args], {
    encoding: 'utf8',
  });
}

/** `at` made a git checkout with `paths` (default everything) committed; its commit. */
function committed(at: string, paths: string[] = ['-A']): string {
  git(at, 'init', '-q');
  git(at, 'add', ...paths);
  git(at, 'commit', '-q', '-m', 'c');
  return git(at, 'rev-parse', 'HEAD').trim();
}

function record(root: string, content: unknown): void {
  mkdirSync(join(root, 'dist'), { recursive: true });
  writeFileSync(join(root, BUILD_INFO_FILE), typeof content === 'string' ? content : JSON.stringify(content));
}

const A_COMMIT = 'a'.repeat(40);
const built = { fromBuild: true } as const;
const sources = { fromBuild: false } as const;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'rg-code-version-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('readCodeVersion', () => {
  it('the build reports its record: the version, commit and dirtiness it was built at, without asking git', async () => {
    const root = packageAt(join(dir, 'pkg'), '1.2.4'); // bumped after the build: the code that runs is 1.2.3's
    record(root, { version: '1.2.3', commit: A_COMMIT, dirty: false });
    expect(await readCodeVersion(root, built)).toBe(`1.2.3+${A_COMMIT}`);
    record(root, { version: '1.2.3', commit: A_COMMIT, dirty: true });
    expect(await readCodeVersion(root, built)).toBe(`1.2.3+${A_COMMIT}.dirty`);
    record(root, { version: '1.2.3', commit: null, dirty: false });
    committed(root);
    expect(await readCodeVersion(root, built)).toBe('1.2.3');
  });

  it("the sources, run directly, ask git even beside a build's record (that build may be older)", async () => {
    const root = packageAt(join(dir, 'pkg'));
    const head = committed(root);
    record(root, { version: '1.2.3', commit: A_COMMIT, dirty: false });
    expect(await readCodeVersion(root, sources)).toBe(`1.2.3+${head}`);
    writeFileSync(join(root, 'package.json'), JSON.stringify({ name: 'p', version: '1.2.3', x: 1 }));
    expect(await readCodeVersion(root, sources)).toBe(`1.2.3+${head}.dirty`);
  });

  it('a build without a record, or with one of another shape, asks git', async () => {
    const root = packageAt(join(dir, 'pkg'));
    const head = committed(root);
    expect(await readCodeVersion(root, built)).toBe(`1.2.3+${head}`);
    const bad = [
      '{',
      { commit: 'HEAD', dirty: false, version: '1' },
      { commit: A_COMMIT, version: '1' },
      { commit: A_COMMIT, dirty: false },
    ];
    for (const content of bad) {
      record(root, content);
      expect(await readCodeVersion(root, built), JSON.stringify(content)).toBe(`1.2.3+${head}`);
    }
  });

  it("a package installed inside another project's checkout is not that project's commit", async () => {
    const project = packageAt(join(dir, 'project'));
    const installed = packageAt(join(project, 'node_modules', 'p'));
    committed(project, ['package.json']);
    expect(await checkoutState(installed)).toEqual({ commit: null, dirty: false });
    expect(await readCodeVersion(installed, sources)).toBe('1.2.3');
  });

  it('a package in a folder of its own repository (package.json tracked there) has that commit', async () => {
    const repo = join(dir, 'mono');
    const sub = packageAt(join(repo, 'packages', 'p'));
    const head = committed(repo);
    expect(await checkoutState(sub)).toEqual({ commit: head, dirty: false });
  });

  it('no checkout: the package version; no package.json either: 0.0.0', async () => {
    const root = packageAt(join(dir, 'pkg'));
    expect(await checkoutState(root)).toEqual({ commit: null, dirty: false });
    expect(await readCodeVersion(root, sources)).toBe('1.2.3');
    expect(await readCodeVersion(join(dir, 'nothing-here'), sources)).toBe('0.0.0');
  });

  it('git that cannot tell (missing here; or refusing the repository) is an error, not "no checkout"', async () => {
    const root = packageAt(join(dir, 'pkg'));
    committed(root);
    const path = process.env['PATH'];
    process.env['PATH'] = join(dir, 'no-git-here');
    try {
      await expect(checkoutState(root)).rejects.toThrow(/ENOENT/);
      expect(await readCodeVersion(root, sources)).toBe('1.2.3');
    } finally {
      process.env['PATH'] = path;
    }
  });
});
