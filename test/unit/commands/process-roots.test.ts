import { readFileSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * One wiring per command (issue 44): every command enters through exactly one process root, named for the kind of
 * process it runs as: a short CLI command (`src/command-root.ts`), the batch supervisor (`src/supervisor-root.ts`),
 * the API server (`src/serve-root.ts`), the metrics exporter (`src/metrics-root.ts`) or the image build
 * (`src/image-root.ts`). The shared factories (`src/composition-root.ts`) are the roots' to use, never a command's.
 */
const ROOT = join(import.meta.dirname, '..', '..', '..');
const PROCESS_ROOTS = ['command-root', 'supervisor-root', 'serve-root', 'metrics-root', 'image-root'];
const ROOT_IMPORT = /from\s+['"](?:\.\.\/)+([a-z-]+-root)\.js['"]/g;

function commandFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return commandFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

function rootsImportedBy(file: string): string[] {
  return [...new Set([...readFileSync(file, 'utf8').matchAll(ROOT_IMPORT)].map((m) => m[1] ?? ''))];
}

describe('process roots', () => {
  const files = commandFiles(join(ROOT, 'src', 'commands'));

  it('every command imports at most one root, and it is a process root (never the shared composition root)', () => {
    expect(files.length).toBeGreaterThan(20);
    const offenders = files
      .map((file) => ({ file: relative(ROOT, file), roots: rootsImportedBy(file) }))
      .filter(({ roots }) => roots.length > 1 || roots.some((r) => !PROCESS_ROOTS.includes(r)));
    expect(offenders).toEqual([]);
  });

  it('each process root is entered by a command', () => {
    const entered = new Set(files.flatMap(rootsImportedBy));
    expect([...entered].sort()).toEqual([...PROCESS_ROOTS].sort());
  });

  it('the check sees two roots in one file (it can fail)', () => {
    const text = "import { a } from '../command-root.js';\nimport { b } from '../../composition-root.js';\n";
    expect([...text.matchAll(ROOT_IMPORT)].map((m) => m[1])).toEqual(['command-root', 'composition-root']);
  });
});
