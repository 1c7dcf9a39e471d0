import { spawnSync } from 'node:child_process';
import { chmod, chown, mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DRIVER_IMAGE, noDocker } from '../support/docker.js';

/**
 * Bad input through the built CLI (issue 10 parts 2 and 4): exit 2, a message naming the field and the rule,
 * and nothing written — the folder the command runs in is listed before and after.
 */
const BIN = fileURLToPath(new URL('../../bin/run.js', import.meta.url));
let dir: string;

function cli(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [BIN, ...args], {
    cwd: dir,
    encoding: 'utf8',
    env: { ...process.env, XDG_STATE_HOME: join(dir, 'state') },
    timeout: 120_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

async function listing(): Promise<string[]> {
  return (await readdir(dir, { recursive: true })).map(String).sort();
}

async function manifest(jobs: Record<string, unknown>[]): Promise<string> {
  const path = join(dir, 'manifest.json');
  await writeFile(path, JSON.stringify({ schema: 'roboguide.e1.batch/v0.1', image: DRIVER_IMAGE, jobs }));
  return path;
}

function job(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    job_id: 'p1',
    argv: ['/opt/driver/run'],
    cwd: join(dir, 'work'),
    outcome_path: join(dir, 'work', 'out', 'p1.json'),
    ...extra,
  };
}

/** Runs the command and checks exit 2, that every pattern is in stderr, and that nothing was written. */
async function refused(args: string[], ...patterns: RegExp[]): Promise<string> {
  const before = await listing();
  const r = cli(args);
  expect(r.code, r.stderr).toBe(2);
  for (const p of patterns) expect(r.stderr).toMatch(p);
  expect(await listing()).toEqual(before);
  return r.stderr;
}

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-e2e-refusals-'));
  await mkdir(join(dir, 'work'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('e1-batch start refuses bad input with exit 2 and writes nothing', () => {
  it('job_id ".."', async () => {
    await refused(
      [
        'e1-batch',
        'start',
        '--manifest',
        await manifest([job({ job_id: '..' })]),
        '--output',
        join(dir, 'D'),
      ],
      /jobs\[0\]\.job_id/,
      /single path segment/,
    );
  });

  it('a cwd that contains the output directory, or the registry', async () => {
    const m = await manifest([job({ cwd: dir })]);
    await refused(
      ['e1-batch', 'start', '--manifest', m, '--output', join(dir, 'D'), '--registry', join(dir, 'r.db')],
      /jobs\[0\]\.cwd: must not contain the output directory/,
      /jobs\[0\]\.cwd: must not contain the registry database/,
    );
  });

  it('a dangling symlink at the outcome path', async () => {
    await mkdir(join(dir, 'work', 'out'));
    const { symlink } = await import('node:fs/promises');
    await symlink('/nonexistent/target', join(dir, 'work', 'out', 'p1.json'));
    await refused(
      ['e1-batch', 'start', '--manifest', await manifest([job()]), '--output', join(dir, 'D')],
      /jobs\[0\]\.outcome_path/,
    );
  });

  it('--bind-address that is not an address of this host', async () => {
    await refused(
      [
        'e1-batch',
        'start',
        '--manifest',
        await manifest([job()]),
        '--output',
        join(dir, 'D'),
        '--bind-address',
        'not-an-ip',
      ],
      /--bind-address: must be an IP address/,
    );
  });

  it("--registry given a URL that is not PostgreSQL's: no folder named after the scheme, no password echoed", async () => {
    const stderr = await refused(
      [
        'e1-batch',
        'start',
        '--manifest',
        await manifest([job()]),
        '--output',
        join(dir, 'D'),
        '--registry',
        'mysql://eval:hunter2@db/registry',
      ],
      /--registry: looks like a URL but is not a PostgreSQL one/,
    );
    expect(stderr).not.toContain('hunter2');
  });

  it('--registry given a malformed PostgreSQL URL: the rule, never the password', async () => {
    const stderr = await refused(
      [
        'e1-batch',
        'start',
        '--manifest',
        await manifest([job()]),
        '--output',
        join(dir, 'D'),
        '--registry',
        'postgresql://eval:hunter2@db:99999/registry',
      ],
      /--registry: is a PostgreSQL URL that cannot be parsed/,
    );
    expect(stderr).not.toContain('hunter2');
  });

  it.skipIf(noDocker)('--registry in a folder that does not exist', async () => {
    await refused(
      [
        'e1-batch',
        'start',
        '--manifest',
        await manifest([job()]),
        '--output',
        join(dir, 'D'),
        '--registry',
        join(dir, 'no', 'such', 'r.db'),
      ],
      /--registry: the folder .* does not exist/,
    );
  });
});

describe('pair run refuses bad input with exit 2 and writes nothing, the registry untouched', () => {
  async function spec(extra: Record<string, unknown>, text?: string): Promise<string> {
    const path = join(dir, 'spec.json');
    await writeFile(path, text ?? JSON.stringify({ ...job(), image: DRIVER_IMAGE, ...extra }));
    return path;
  }

  it('an invalid spec never creates the (new) registry it names', async () => {
    await refused(
      [
        'pair',
        'run',
        '--spec',
        await spec({ job_id: '.' }),
        '--output',
        join(dir, 'run'),
        '--registry',
        join(dir, 'new.db'),
      ],
      /job_id/,
    );
  });

  it('a JSON syntax error without quoting the input', async () => {
    const stderr = await refused(
      [
        'pair',
        'run',
        '--spec',
        await spec({}, '{"job_id":"p1","environment":{"X":"sk-e2e-SECRET-1"'),
        '--output',
        join(dir, 'run'),
      ],
      /not valid JSON/,
    );
    expect(stderr).not.toContain('sk-e2e-SECRET-1');
  });

  it('an outcome folder inside the output directory', async () => {
    await refused(
      [
        'pair',
        'run',
        '--spec',
        await spec({ outcome_path: join(dir, 'run', 'receipt.json') }),
        '--output',
        join(dir, 'run'),
      ],
      /outcome_path: must not be the output directory/,
    );
  });

  it('--registry x://anything', async () => {
    await refused(
      ['pair', 'run', '--spec', await spec({}), '--output', join(dir, 'run'), '--registry', 'x://anything'],
      /--registry: looks like a URL but is not a PostgreSQL one/,
    );
  });
});

// docs/secrets.md "Local users" (F7): a socket folder another user can write to let them take root's socket over.
describe('serve --socket in a folder another user could use: exit 2 before anything is made or bound', () => {
  it.skipIf(process.geteuid?.() !== 0)('a folder owned by user 65534', async () => {
    const nob = join(dir, 'atk-nob');
    await mkdir(nob, { mode: 0o700 });
    await chown(nob, 65534, 65534);
    await refused(
      ['serve', '--socket', join(nob, 'api.sock')],
      /--socket: \S+atk-nob is owned by user 65534, not by you \(another user could swap it\)/,
    );
  });

  it('a folder of ours that others may write to (0777)', async () => {
    const open = join(dir, 'open');
    await mkdir(open);
    await chmod(open, 0o777);
    await refused(
      ['serve', '--socket', join(open, 'api.sock')],
      /--socket: \S+open is writable by other users/,
    );
  });

  it.skipIf(process.geteuid?.() !== 0)(
    'the sticky /tmp itself (the old docs example /tmp/rg.sock)',
    async () => {
      await refused(
        ['serve', '--socket', '/tmp/rg.sock'],
        /--socket: \/tmp is writable by other users/,
        /XDG_RUNTIME_DIR/,
      );
    },
  );
});
