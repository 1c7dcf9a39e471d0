import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * The docs name the files that decide each rule (`docs/architecture.md`'s "Where does X happen" and "Where to
 * change X"). A file moved or deleted without its docs leaves a reader at a path that is not there: every path of
 * this repository a doc quotes in backticks must exist.
 */
const ROOT = join(import.meta.dirname, '..', '..');
const QUOTED_PATH = /`((?:src|test|bench|scripts|docker|clients|\.ci)\/[^`\s]+)`/g;
/** Docs that describe what is not built yet, or another repository's files (the frameworks' own `src/`). */
const SKIPPED = new Set(['claimed-pair-design.md', 'testing.md']);

function quotedPaths(text: string): string[] {
  return [...text.matchAll(QUOTED_PATH)]
    .map((match) => (match[1] ?? '').split(':')[0] ?? '')
    .filter((path) => path !== '' && !/[*<>{}]/.test(path));
}

describe('paths the docs quote', () => {
  const docs = readdirSync(join(ROOT, 'docs'))
    .filter((name) => name.endsWith('.md') && !SKIPPED.has(name))
    .map((name) => join('docs', name));
  for (const doc of ['README.md', ...docs]) {
    it(`${doc} quotes only paths that exist`, () => {
      const missing = quotedPaths(readFileSync(join(ROOT, doc), 'utf8')).filter(
        (path) => !existsSync(join(ROOT, path)),
      );
      expect(missing).toEqual([]);
    });
  }

  it('the architecture guide names a file for each rule of the spec', () => {
    const text = readFileSync(join(ROOT, 'docs', 'architecture.md'), 'utf8');
    expect(text).toContain('## Where does X happen');
    expect(quotedPaths(text).length).toBeGreaterThan(100);
  });
});
