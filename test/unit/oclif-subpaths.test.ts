import { readFileSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * oclif's index loads all of oclif and semver (47 modules) at every command's start; the CLI imports its subpaths
 * (`@oclif/core/command`, `/flags`, `/execute`, `/ux`, …) instead (docs/benchmarks.md, issue 39). One import of
 * the index anywhere on a command's path brings those modules back, so none is allowed in src/ or bin/run.js.
 */
const ROOT = join(import.meta.dirname, '..', '..');
const INDEX_IMPORT = /from\s+['"]@oclif\/core['"]|import\(\s*['"]@oclif\/core['"]\s*\)/;

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return /\.(ts|js|mjs)$/.test(entry.name) ? [path] : [];
  });
}

describe('oclif by its subpaths', () => {
  it('no file of src/ nor bin/run.js imports the index of @oclif/core', () => {
    const files = [...sourceFiles(join(ROOT, 'src')), join(ROOT, 'bin', 'run.js')];
    const offenders = files
      .filter((file) => INDEX_IMPORT.test(readFileSync(file, 'utf8')))
      .map((file) => relative(ROOT, file));
    expect(files.length).toBeGreaterThan(100);
    expect(offenders).toEqual([]);
  });
});
