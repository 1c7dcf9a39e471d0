import { mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { registryLocation } from '../../src/adapters/registry/default-path.js';
import { checkRegistryLocation, openRegistryAt } from '../../src/adapters/registry/open-registry.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-registry-loc-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('registryLocation', () => {
  it.each(['postgres://user:pw@host/db', 'postgresql://h/db', 'x://anything', 'postgres:db'])('refuses the URL-like %j (exit 2) without repeating it', (value) => {
    let error: unknown;
    try {
      registryLocation(value);
    } catch (err) {
      error = err;
    }
    expect(error).toMatchObject({ code: 'E_USAGE', exitCode: 2, issues: [{ path: '--registry', rule: expect.stringMatching(/URL.*PostgreSQL registry is not built yet/) as string }] });
    expect((error as Error).message).not.toContain('pw');
  });

  it('tells a named location from the default', () => {
    expect(registryLocation('r.db', {}, '/home/u')).toEqual({ path: join(process.cwd(), 'r.db'), explicit: true });
    expect(registryLocation(undefined, {}, '/home/u')).toEqual({ path: '/home/u/.local/state/roboguide-eval/registry.db', explicit: false });
  });
});

describe('checkRegistryLocation / openRegistryAt', () => {
  it('refuses a named file in a folder that does not exist, creating nothing', async () => {
    const path = join(dir, 'no', 'such', 'r.db');
    expect(() => checkRegistryLocation({ path, explicit: true })).toThrow(expect.objectContaining({ code: 'E_USAGE', exitCode: 2, message: expect.stringMatching(/does not exist/) as string }));
    expect(() => openRegistryAt({ path, explicit: true })).toThrow(expect.objectContaining({ exitCode: 2 }));
    expect(await readdir(dir)).toEqual([]);
  });

  it('refuses an existing file that is not a registry, leaving it unchanged', async () => {
    const path = join(dir, 'notes.db');
    await writeFile(path, 'not a database');
    expect(() => openRegistryAt({ path, explicit: true })).toThrow(expect.objectContaining({ exitCode: 2, message: expect.stringMatching(/not a roboguide-eval registry/) as string }));
    expect(await readdir(dir)).toEqual(['notes.db']);
    expect((await stat(join(dir, 'notes.db'))).size).toBe('not a database'.length);
    expect(() => openRegistryAt({ path: dir, explicit: true })).toThrow(expect.objectContaining({ message: expect.stringMatching(/is not a file/) as string }));
  });

  it('takes an empty SQLite database (a first migration killed mid-transaction) as a new registry; refuses one with other tables', () => {
    const path = join(dir, 'r.db');
    // What a SIGKILL inside the first migration leaves: WAL mode set, the transaction rolled back, no table.
    const killed = new DatabaseSync(path);
    killed.exec('PRAGMA journal_mode = WAL');
    killed.exec('BEGIN; CREATE TABLE schema_version (v INTEGER); ROLLBACK');
    killed.close();
    expect(() => checkRegistryLocation({ path, explicit: true })).not.toThrow();
    const registry = openRegistryAt({ path, explicit: true });
    registry.close();
    expect(() => checkRegistryLocation({ path, explicit: true })).not.toThrow();

    const other = join(dir, 'other.db');
    const db = new DatabaseSync(other);
    db.exec('CREATE TABLE notes (t TEXT)');
    db.close();
    expect(() => openRegistryAt({ path: other, explicit: true })).toThrow(expect.objectContaining({ exitCode: 2, message: expect.stringMatching(/not a roboguide-eval registry/) as string }));
  });

  it('creates a new named registry in an existing folder, then accepts it as existing', () => {
    const path = join(dir, 'r.db');
    openRegistryAt({ path, explicit: true }).close();
    expect(() => checkRegistryLocation({ path, explicit: true })).not.toThrow();
  });

  it('creates the default location on first use', async () => {
    const path = join(dir, 'state', 'roboguide-eval', 'registry.db');
    openRegistryAt({ path, explicit: false }).close();
    expect((await stat(path)).isFile()).toBe(true);
  });

  it('creates the database and its -wal/-shm 0600 whatever the umask', async () => {
    const path = join(dir, 'private.db');
    const previous = process.umask(0o000);
    try {
      const registry = openRegistryAt({ path, explicit: true });
      registry.admit({ batchId: 'b', jobId: 'j', claimId: 'c', gpuMib: 0 }); // a write: the -wal and -shm exist now
      for (const file of [path, `${path}-wal`, `${path}-shm`]) expect((await stat(file)).mode & 0o777, file).toBe(0o600);
      registry.close();
    } finally {
      process.umask(previous);
    }
  });
});
