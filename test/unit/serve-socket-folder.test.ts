import { chmod, chown, lstat, mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { claimDataDir, claimSocketFolder } from '../../src/adapters/http/socket-folder.js';
import { RoboguideError } from '../../src/core/errors.js';
import { HOSTILE_UID } from '../support/exchange-adversary.js';

/**
 * docs/secrets.md "Local users", F7: `serve --socket` in a folder another user can write to (theirs, 0777, /tmp)
 * let uid 65534 remove root's socket and bind their own, or bind the name first, and read root's requests (secret
 * env values included). The socket's folder must be ours, not a link, and writable by no one else.
 */
const asRoot = process.geteuid?.() === 0;
let base = '';

beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), 'rg-socket-dir-'));
  await chmod(base, 0o755);
});

afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

async function refusal(socket: string): Promise<RoboguideError> {
  const err: unknown = await claimSocketFolder(socket).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(RoboguideError);
  const refused = err as RoboguideError;
  expect(refused.code).toBe('E_SOCKET_UNSAFE');
  expect(refused.exitCode).toBe(2);
  return refused;
}

describe('serve --socket: the socket folder is ours and no one else can write to it (F7)', () => {
  it('accepts a mkdtemp folder (0700, ours) and makes a missing folder 0700', async () => {
    const own = await mkdtemp(join(base, 'own-'));
    expect(await claimSocketFolder(join(own, 'api.sock'))).toBe(join(own, 'api.sock'));
    expect(await claimSocketFolder(join(own, 'new', 'api.sock'))).toBe(join(own, 'new', 'api.sock'));
    expect(((await lstat(join(own, 'new'))).mode & 0o7777).toString(8)).toBe('700');
  });

  it.skipIf(!asRoot)('refuses a folder owned by another user (they could replace the socket)', async () => {
    const nob = join(base, 'atk-nob');
    await mkdir(nob, { mode: 0o700 });
    await chown(nob, HOSTILE_UID, HOSTILE_UID);
    const err = await refusal(join(nob, 'api.sock'));
    expect(err.message).toBe(
      `--socket: ${nob} is owned by user ${HOSTILE_UID}, not by you (another user could swap it)`,
    );
    expect(await readdir(nob)).toEqual([]);
  });

  it('refuses a folder of ours that others may write to (0777)', async () => {
    const open = join(base, 'open');
    await mkdir(open);
    await chmod(open, 0o777);
    const err = await refusal(join(open, 'api.sock'));
    expect(err.message).toBe(
      `--socket: ${open} is writable by other users (another user could replace what is inside)`,
    );
    expect(await readdir(open)).toEqual([]);
  });

  it('refuses a link to a folder of ours, never followed', async () => {
    const own = await mkdtemp(join(base, 'own-'));
    const link = join(base, 'link');
    await symlink(own, link);
    const err = await refusal(join(link, 'api.sock'));
    expect(err.message).toMatch(new RegExp(`^--socket: ${link} is a symbolic link`));
  });

  it.skipIf(!asRoot)(
    'refuses sticky /tmp itself (the docs example /tmp/rg.sock): another user can bind the name first',
    async () => {
      const err = await refusal('/tmp/rg.sock');
      expect(err.message).toBe(
        '--socket: /tmp is writable by other users (another user could replace what is inside)',
      );
      expect(err.suggestions?.join(' ')).toMatch(/XDG_RUNTIME_DIR/);
    },
  );
});

describe("serve --data-dir: the same rules as the socket's folder (evidence and session files)", () => {
  async function dataDirRefusal(dataDir: string): Promise<RoboguideError> {
    const err: unknown = await claimDataDir(dataDir).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(RoboguideError);
    expect((err as RoboguideError).code).toBe('E_OUTPUT_UNSAFE');
    return err as RoboguideError;
  }

  it('accepts a folder of ours again with what it holds, and makes a missing one 0700', async () => {
    const own = await mkdtemp(join(base, 'own-'));
    await writeFile(join(own, 'kept'), 'x');
    expect(await claimDataDir(own)).toBe(own);
    expect(await claimDataDir(join(own, 'data'))).toBe(join(own, 'data'));
    expect(((await lstat(join(own, 'data'))).mode & 0o7777).toString(8)).toBe('700');
  });

  it.skipIf(!asRoot)('refuses a data dir owned by user 65534, and a link to one of ours', async () => {
    const nob = join(base, 'nob-data');
    await mkdir(nob, { mode: 0o700 });
    await chown(nob, HOSTILE_UID, HOSTILE_UID);
    expect((await dataDirRefusal(nob)).message).toBe(
      `--data-dir: ${nob} is owned by user ${HOSTILE_UID}, not by you (another user could swap it)`,
    );
    const own = await mkdtemp(join(base, 'own-'));
    await symlink(own, join(base, 'data-link'));
    expect((await dataDirRefusal(join(base, 'data-link'))).message).toMatch(/data-link is a symbolic link/);
  });
});
