/**
 * The release rule is written once (docs/claimed-pair-design.md): in src/app, a reservation is released outside
 * terminal reconciliation only through src/app/pair/claim.ts. Serve's sessions are not pairs: their teardown
 * (session-deletion, session-teardown, session-restart) releases its own reservations and is listed here by name.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '../../../..');
const SESSION_TEARDOWN = [
  'src/app/serve/session-deletion.ts',
  'src/app/serve/session-restart.ts',
  'src/app/serve/session-teardown.ts',
];

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

describe('the slot-release rule', () => {
  it('src/app calls registry.release( in src/app/pair/claim.ts only (sessions apart)', () => {
    const callers = sources(join(ROOT, 'src/app'))
      .filter((file) => /registry\.release\(/.test(readFileSync(file, 'utf8')))
      .map((file) => relative(ROOT, file))
      .filter((file) => !SESSION_TEARDOWN.includes(file))
      .sort();
    expect(callers).toEqual(['src/app/pair/claim.ts']);
  });
});
