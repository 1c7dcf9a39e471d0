import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BUILD_INFO_FILE, checkoutState, readCodeVersion } from '../../src/adapters/code-version.js';

let dir: string;

/** A package folder (package.json at version 1.2.3) at `at`. */
function packageAt(at: string): string {
  mkdirSync(at, { recursive: true });
  writeFileSync(join(at, 'package.json'), JSON.stringify({ name: 'p', version: '1.2.3' }));
  return at;
}

/** `at` made a git checkout with everything in it committed; its commit. */
function committed(at: string): string {
  const git = (...args: string[]) =>
    execFileSync('git', ['-C', at, '-c', 'user.name=t', '-c', 'user.email=t@t', ...args], {
      encoding: 'utf8',
    });
  git('init', '-q');
  git('add', '-A');
  git('commit', '-q', '-m', 'c');
  return git('rev-parse', 'HEAD').trim();
}

function stamp(root: string, content: unknown): void {
  mkdirSync(join(root, 'dist'), { recursive: true });
  writeFileSync(join(root, BUILD_INFO_FILE), typeof content === 'string' ? content : JSON.stringify(content));
}

const A_COMMIT = 'a'.repeat(40);

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'rg-code-version-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('readCodeVersion', () => {
  it("takes the build's record of its checkout, without asking git (the folder is no checkout at all)", async () => {
    const root = packageAt(join(dir, 'pkg'));
    stamp(root, { commit: A_COMMIT, dirty: false });
    expect(await readCodeVersion(root)).toBe(`1.2.3+${A_COMMIT}`);
    stamp(root, { commit: A_COMMIT, dirty: true });
    expect(await readCodeVersion(root)).toBe(`1.2.3+${A_COMMIT}.dirty`);
  });

  it('a build made outside a checkout says the package version alone, even once the folder is one', async () => {
    const root = packageAt(join(dir, 'pkg'));
    committed(root);
    stamp(root, { commit: null, dirty: false });
    expect(await readCodeVersion(root)).toBe('1.2.3');
  });

  it("without a build record (the sources run directly) asks git: the checkout's commit, .dirty once a tracked file changed", async () => {
    const root = packageAt(join(dir, 'pkg'));
    const head = committed(root);
    expect(await readCodeVersion(root)).toBe(`1.2.3+${head}`);
    writeFileSync(join(root, 'package.json'), JSON.stringify({ name: 'p', version: '1.2.3', x: 1 }));
    expect(await readCodeVersion(root)).toBe(`1.2.3+${head}.dirty`);
  });

  it('a record of another shape is not trusted: git is asked instead', async () => {
    const root = packageAt(join(dir, 'pkg'));
    const head = committed(root);
    for (const bad of [
      '{',
      { commit: 'HEAD', dirty: false },
      { commit: A_COMMIT },
      { commit: 7, dirty: false },
    ]) {
      stamp(root, bad);
      expect(await readCodeVersion(root), JSON.stringify(bad)).toBe(`1.2.3+${head}`);
    }
  });

  it("an installed package inside another project's checkout is not that project's commit", async () => {
    const project = packageAt(join(dir, 'project'));
    const installed = packageAt(join(project, 'node_modules', 'p'));
    committed(project);
    expect(await checkoutState(installed)).toEqual({ commit: null, dirty: false });
    expect(await readCodeVersion(installed)).toBe('1.2.3');
  });

  it('no git checkout and no record: the package version; no package.json: 0.0.0', async () => {
    const root = packageAt(join(dir, 'pkg'));
    expect(await readCodeVersion(root)).toBe('1.2.3');
    expect(await readCodeVersion(join(dir, 'nothing-here'))).toBe('0.0.0');
  });
});
