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

function refusal(value: string): unknown {
  try {
    registryLocation(value);
  } catch (err) {
    return err;
  }
  return null;
}

describe('registryLocation', () => {
  it.each(['x://user:hunter2@anything', 'mysql://u:hunter2@h/db', 'postgres:db', 'postgresql:hunter2@h/db'])(
    'refuses the URL-like %j that is not a PostgreSQL URL (exit 2) without repeating it',
    (value) => {
      const error = refusal(value);
      expect(error).toMatchObject({
        code: 'E_USAGE',
        exitCode: 2,
        issues: [
          {
            path: '--registry',
            rule: expect.stringMatching(/looks like a URL but is not a PostgreSQL one/) as string,
          },
        ],
      });
      expect((error as Error).message).not.toContain('hunter2');
    },
  );

  it.each([
    ['postgres://eval:hunter2@/registry', /without a database name|cannot be parsed|host/],
    ['postgres://eval:hunter2@db.example:99999/registry', /port/],
    ['postgresql://eval:hunter2@db.example:5432/', /database name/],
  ])(
    'refuses the malformed PostgreSQL URL %j (exit 2) naming the rule, never the password',
    (value, rule) => {
      const error = refusal(value);
      if (value === 'postgres://eval:hunter2@/registry') {
        // No host and no ?host=: libpq's default socket; accepted.
        expect(error).toBeNull();
        return;
      }
      expect(error).toMatchObject({
        code: 'E_USAGE',
        exitCode: 2,
        issues: [{ path: '--registry', rule: expect.stringMatching(rule) as string }],
      });
      expect((error as Error).message).not.toContain('hunter2');
    },
  );

  it('takes libpq-style PostgreSQL URLs; what it records and shows never holds the password', () => {
    const socket = registryLocation('postgres://eval@/registry?host=/run/pg');
    expect(socket).toMatchObject({
      kind: 'postgres',
      path: 'postgres://eval@/registry?host=/run/pg',
      connection: { host: '/run/pg', user: 'eval', database: 'registry', password: undefined },
    });
    const tcp = registryLocation(
      'postgresql://eval:hunter%40%32@db.example:5433/registry?sslmode=require&application_name=rg',
    );
    expect(tcp).toMatchObject({
      kind: 'postgres',
      connection: {
        host: 'db.example',
        port: 5433,
        user: 'eval',
        password: 'hunter@2',
        database: 'registry',
        options: { sslmode: 'require', application_name: 'rg' },
      },
    });
    expect(tcp.path).toBe('postgres://eval@db.example:5433/registry?sslmode=require&application_name=rg');
    expect(JSON.stringify({ ...tcp, connection: undefined })).not.toContain('hunter');
    const inQuery = registryLocation('postgres:///registry?host=/run/pg&user=eval&password=hunter2');
    expect(inQuery.path).not.toContain('hunter2');
  });

  it('tells a named location from the default', () => {
    expect(registryLocation('r.db', {}, '/home/u')).toEqual({
      path: join(process.cwd(), 'r.db'),
      explicit: true,
    });
    expect(registryLocation(undefined, {}, '/home/u')).toEqual({
      path: '/home/u/.local/state/roboguide-eval/registry.db',
      explicit: false,
    });
  });
});

describe('checkRegistryLocation / openRegistryAt', () => {
  it('refuses a named file in a folder that does not exist, creating nothing', async () => {
    const path = join(dir, 'no', 'such', 'r.db');
    expect(() => checkRegistryLocation({ path, explicit: true })).toThrow(
      expect.objectContaining({
        code: 'E_USAGE',
        exitCode: 2,
        message: expect.stringMatching(/does not exist/) as string,
      }),
    );
    await expect(openRegistryAt({ path, explicit: true })).rejects.toMatchObject({ exitCode: 2 });
    expect(await readdir(dir)).toEqual([]);
  });

  it('refuses an existing file that is not a registry, leaving it unchanged', async () => {
    const path = join(dir, 'notes.db');
    await writeFile(path, 'not a database');
    await expect(openRegistryAt({ path, explicit: true })).rejects.toMatchObject({
      exitCode: 2,
      message: expect.stringMatching(/not a roboguide-eval registry/) as string,
    });
    expect(await readdir(dir)).toEqual(['notes.db']);
    expect((await stat(join(dir, 'notes.db'))).size).toBe('not a database'.length);
    await expect(openRegistryAt({ path: dir, explicit: true })).rejects.toMatchObject({
      message: expect.stringMatching(/is not a file/) as string,
    });
  });

  it('takes an empty SQLite database (a first migration killed mid-transaction) as a new registry; refuses one with other tables', async () => {
    const path = join(dir, 'r.db');
    // What a SIGKILL inside the first migration leaves: WAL mode set, the transaction rolled back, no table.
    const killed = new DatabaseSync(path);
    killed.exec('PRAGMA journal_mode = WAL');
    killed.exec('BEGIN; CREATE TABLE schema_version (v INTEGER); ROLLBACK');
    killed.close();
    expect(() => checkRegistryLocation({ path, explicit: true })).not.toThrow();
    const registry = await openRegistryAt({ path, explicit: true });
    await registry.close();
    expect(() => checkRegistryLocation({ path, explicit: true })).not.toThrow();

    const other = join(dir, 'other.db');
    const db = new DatabaseSync(other);
    db.exec('CREATE TABLE notes (t TEXT)');
    db.close();
    await expect(openRegistryAt({ path: other, explicit: true })).rejects.toMatchObject({
      exitCode: 2,
      message: expect.stringMatching(/not a roboguide-eval registry/) as string,
    });
  });

  it('creates a new named registry in an existing folder, then accepts it as existing', async () => {
    const path = join(dir, 'r.db');
    await (await openRegistryAt({ path, explicit: true })).close();
    expect(() => checkRegistryLocation({ path, explicit: true })).not.toThrow();
  });

  it('creates the default location on first use', async () => {
    const path = join(dir, 'state', 'roboguide-eval', 'registry.db');
    await (await openRegistryAt({ path, explicit: false })).close();
    expect((await stat(path)).isFile()).toBe(true);
  });

  it('creates the database and its -wal/-shm 0600 whatever the umask', async () => {
    const path = join(dir, 'private.db');
    const previous = process.umask(0o000);
    try {
      const registry = await openRegistryAt({ path, explicit: true });
      await registry.admit({ batchId: 'b', jobId: 'j', claimId: 'c', gpuMib: 0 }); // a write: the -wal and -shm exist now
      for (const file of [path, `${path}-wal`, `${path}-shm`])
        expect((await stat(file)).mode & 0o777, file).toBe(0o600);
      await registry.close();
    } finally {
      process.umask(previous);
    }
  });
});
