import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

/**
 * scripts/move-files.js (issue 44) on a small git repository of its own: the moves the rules choose, every reference
 * style it rewrites, a second run that changes nothing, and the refusals that leave the tree as it was.
 */
const SCRIPT = resolve(import.meta.dirname, '../../scripts/move-files.js');

const FILES: Record<string, string> = {
  'src/app/walk-pair.ts': "import { rule } from '../core/rule.js';\nexport const walkPair = rule;\n",
  'src/app/pair-notes.ts': "export { walkPair } from './walk-pair.js';\n",
  'src/app/intake.ts': "import { walkPair } from './walk-pair.js';\nexport const admit = walkPair;\n",
  'src/core/rule.ts': 'export const rule = 1;\n',
  'src/core/host.ts': 'export const a = 1;\n',
  'src/app/host.ts': 'export const b = 1;\n',
  'test/unit/walk-pair.test.ts': [
    "import { walkPair } from '../../src/app/walk-pair.js';",
    "import { near } from '../support/near.js';",
    "const fixtures = new URL('../fixtures/', import.meta.url);",
    "const docs = join(import.meta.dirname, '..', '..', 'docs', 'a.md');",
    "// the dist copy: dist/app/walk-pair.js, and src/app/walk-pair.ts's sibling src/app/walk-pair.tsx is no mention",
    '',
  ].join('\n'),
  'test/unit/host.test.ts':
    "import { a } from '../../src/core/host.js';\nimport { b } from '../../src/app/host.js';\n",
  'test/unit/rule.test.ts': "import { rule } from '../../src/core/rule.js';\n",
  'test/support/near.ts': 'export const near = 1;\n',
  'test/support/child.mjs': "import { walkPair } from '../../dist/app/walk-pair.js';\n",
  'test/fixtures/x.txt': 'x\n',
  'docs/a.md':
    'The pair runs in `src/app/walk-pair.ts:12` (`app/walk-pair.ts`); tests: `test/unit/walk-pair.test.ts`.\n',
};

let repo: string;
const run = (...args: string[]) => spawnSync('node', [SCRIPT, ...args], { cwd: repo, encoding: 'utf8' });
const read = (p: string) => readFileSync(join(repo, p), 'utf8');
const git = (...args: string[]) => execFileSync('git', args, { cwd: repo, encoding: 'utf8' });

beforeEach(() => {
  repo = mkdtempSync(join(tmpdir(), 'move-files-'));
  for (const [path, text] of Object.entries(FILES)) {
    mkdirSync(dirname(join(repo, path)), { recursive: true });
    writeFileSync(join(repo, path), text);
  }
  git('init', '-q');
  git('add', '.');
  git('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qm', 'start');
});
afterEach(() => rmSync(repo, { recursive: true, force: true }));

describe('scripts/move-files.js --rules', () => {
  it('moves the pair engine and the tests named after one source, rewriting every way a path is written', () => {
    const first = run('--rules');
    expect(first.status, first.stderr).toBe(0);
    expect(existsSync(join(repo, 'src/app/pair/walk-pair.ts'))).toBe(true);
    expect(existsSync(join(repo, 'src/app/pair/pair-notes.ts'))).toBe(true);
    expect(existsSync(join(repo, 'src/app/intake.ts'))).toBe(true);
    expect(read('src/app/pair/walk-pair.ts')).toContain("from '../../core/rule.js'");
    expect(read('src/app/pair/pair-notes.ts')).toContain("from './walk-pair.js'");
    expect(read('src/app/intake.ts')).toContain("from './pair/walk-pair.js'");
    expect(read('test/unit/app/pair/walk-pair.test.ts')).toBe(
      [
        "import { walkPair } from '../../../../src/app/pair/walk-pair.js';",
        "import { near } from '../../../support/near.js';",
        "const fixtures = new URL('../../../fixtures/', import.meta.url);",
        "const docs = join(import.meta.dirname, '..', '..', '..', '..', 'docs', 'a.md');",
        "// the dist copy: dist/app/pair/walk-pair.js, and src/app/pair/walk-pair.ts's sibling src/app/walk-pair.tsx is no mention",
        '',
      ].join('\n'),
    );
    expect(read('test/unit/core/rule.test.ts')).toContain("from '../../../src/core/rule.js'");
    expect(read('test/support/child.mjs')).toContain("from '../../dist/app/pair/walk-pair.js'");
    expect(read('docs/a.md')).toBe(
      'The pair runs in `src/app/pair/walk-pair.ts:12` (`app/pair/walk-pair.ts`); tests: `test/unit/app/pair/walk-pair.test.ts`.\n',
    );
    // host.test.ts imports both host.ts files: it stays, and says why.
    expect(existsSync(join(repo, 'test/unit/host.test.ts'))).toBe(true);
    expect(first.stdout).toContain('test/unit/host.test.ts  (imports several of');
    expect(git('status', '--porcelain')).toMatch(
      /^R. src\/app\/walk-pair.ts -> src\/app\/pair\/walk-pair.ts$/m,
    );
  });

  it('changes nothing when run again', () => {
    expect(run('--rules').status).toBe(0);
    git('add', '-A');
    const staged = git('diff', '--cached');
    const second = run('--rules');
    expect(second.status).toBe(0);
    expect(second.stdout).toContain('moves: 0 under src/, 0 under test/, 0 in all');
    expect(git('diff')).toBe('');
    expect(git('diff', '--cached')).toBe(staged);
  });

  it('refuses a target that exists, and a relative path that names nothing, changing nothing', () => {
    mkdirSync(join(repo, 'src/app/pair'));
    writeFileSync(join(repo, 'src/app/pair/walk-pair.ts'), 'export const other = 1;\n');
    const collision = run('--rules');
    expect(collision.status).toBe(1);
    expect(collision.stderr).toContain(
      'src/app/pair/walk-pair.ts exists: refusing to move src/app/walk-pair.ts',
    );
    rmSync(join(repo, 'src/app/pair'), { recursive: true });
    writeFileSync(join(repo, 'src/app/broken.ts'), "import { gone } from './gone.js';\n");
    const broken = run('--rules');
    expect(broken.status).toBe(1);
    expect(broken.stderr).toContain("src/app/broken.ts:1  './gone.js'");
    expect(git('status', '--porcelain')).toBe('?? src/app/broken.ts\n');
  });

  it('moves a whole folder given by hand', () => {
    const moved = run('src/core', 'src/base');
    expect(moved.status, moved.stderr).toBe(0);
    expect(read('src/app/walk-pair.ts')).toContain("from '../base/rule.js'");
    expect(read('test/unit/host.test.ts')).toContain("from '../../src/base/host.js'");
  });
});

describe('scripts/move-files.js --check on this repository', () => {
  it('finds every relative path resolving and every path docs/architecture.md, docs/spec.md and README.md cite', () => {
    const check = spawnSync('node', [SCRIPT, '--check'], { encoding: 'utf8' });
    expect(check.stdout + check.stderr).toContain(
      'missing in docs/architecture.md,README.md,docs/spec.md:\n  none',
    );
    expect(check.status).toBe(0);
  });
});
