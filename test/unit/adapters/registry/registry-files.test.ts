import { chmod, chown, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SqliteCapacityRegistry } from '../../../../src/adapters/registry/sqlite-capacity-registry.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-registry-files-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const asRoot = process.getuid?.() === 0;

describe("the registry's files: ours, never a link, writable by no one else", () => {
  it('opens a registry of its own (made 0600 in a 0700 folder)', async () => {
    const registry = SqliteCapacityRegistry.open({ path: join(dir, 'own', 'registry.db') });
    await registry.close();
  });

  it.skipIf(!asRoot)(
    'refuses files another user made or can write, a link, and a folder another user owns or can write (another user deleted the record of live mounts through one)',
    async () => {
      const cases: [string, () => Promise<string>, RegExp][] = [
        [
          'a database another user made',
          async () => {
            const path = join(dir, 'theirs.db');
            for (const f of [path, `${path}-wal`, `${path}-shm`]) {
              await writeFile(f, '');
              await chown(f, 65534, 65534);
            }
            return path;
          },
          /theirs\.db is owned by user 65534/,
        ],
        [
          'a -wal others can write',
          async () => {
            const path = join(dir, 'open.db');
            await writeFile(`${path}-wal`, '');
            await chmod(`${path}-wal`, 0o666);
            return path;
          },
          /open\.db-wal is writable by other users/,
        ],
        [
          'a link',
          async () => {
            await writeFile(join(dir, 'target.db'), '');
            await symlink(join(dir, 'target.db'), join(dir, 'link.db'));
            return join(dir, 'link.db');
          },
          /link\.db is not a regular file/,
        ],
        [
          "another user's folder",
          async () => {
            await mkdir(join(dir, 'their-folder'));
            await chown(join(dir, 'their-folder'), 65534, 65534);
            return join(dir, 'their-folder', 'registry.db');
          },
          /their-folder is owned by user 65534/,
        ],
      ];
      for (const [what, make, rule] of cases) {
        const path = await make();
        expect(() => SqliteCapacityRegistry.open({ path }), what).toThrow(rule);
      }
    },
  );
});
