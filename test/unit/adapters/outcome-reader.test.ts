import { mkdtemp, rm, symlink, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readOutcomeFile, readOutcomeSha256 } from '../../../src/adapters/outcome-reader.js';
import { MAX_OUTCOME_BYTES } from '../../../src/core/outcome.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-outcome-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('readOutcomeFile', () => {
  it('reads a file within the limit', async () => {
    await writeFile(join(dir, 'o.json'), '{"a":1}');
    const read = await readOutcomeFile(join(dir, 'o.json'));
    expect(read.state === 'present' && Buffer.from(read.bytes).toString()).toBe('{"a":1}');
  });

  it('refuses a 17 MiB file unread, and gives it no digest', async () => {
    const path = join(dir, 'big.json');
    await writeFile(path, '');
    await truncate(path, 17 * 1024 * 1024);
    expect(await readOutcomeFile(path)).toEqual({ state: 'too_large', sizeBytes: 17 * 1024 * 1024 });
    expect(await readOutcomeSha256(path)).toBeNull();
  });

  it('reads a file of exactly the limit', async () => {
    const path = join(dir, 'edge.json');
    await writeFile(path, '');
    await truncate(path, MAX_OUTCOME_BYTES);
    const read = await readOutcomeFile(path);
    expect(read.state === 'present' && read.bytes.byteLength).toBe(MAX_OUTCOME_BYTES);
  });

  it('never follows a symlink', async () => {
    await symlink('/etc/hostname', join(dir, 'link.json'));
    expect(await readOutcomeFile(join(dir, 'link.json'))).toEqual({ state: 'unreadable', code: 'ELOOP' });
  });
});
