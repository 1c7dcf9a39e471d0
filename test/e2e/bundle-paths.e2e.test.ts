/**
 * The bundled commands (`npm run build`: dist/bundle/) find the package's own files — docker/ for `images build`,
 * bin/run.js for the detached supervisor, package.json for the code version — from a chunk that sits at another
 * depth than the tsc output. A path computed from the module's own place broke every batch once.
 */
import { existsSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '../..');

describe('the bundled composition root', () => {
  it('names the package root, its docker/ folder and bin/run.js', () => {
    const chunks = join(ROOT, 'dist/bundle/chunks');
    const chunk = readdirSync(chunks).find((f) => f.startsWith('composition-root-') && f.endsWith('.cjs'));
    expect(chunk, 'a composition-root chunk in dist/bundle/chunks (run npm run build)').toBeDefined();
    // The bundle is CommonJS (scripts/bundle-cli.js): required as bin/run.js requires it.
    const mod = createRequire(import.meta.url)(join(chunks, chunk!)) as Record<string, unknown>;
    const values = Object.values(mod).filter((v): v is string => typeof v === 'string');
    // Both are the package root joined with a name (package-root.ts): right only if the root was found. The root
    // itself is exported only while another chunk imports it, which the bundler decides.
    expect(values).toContain(join(ROOT, 'docker'));
    expect(values).toContain(join(ROOT, 'bin', 'run.js'));
    expect(existsSync(join(ROOT, 'docker'))).toBe(true);
  });
});
