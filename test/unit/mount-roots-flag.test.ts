import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parsePasswdHomes } from '../../src/adapters/host-homes.js';
import { mountRootsFrom } from '../../src/cli/flags.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-mount-roots-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('--mount-root', () => {
  it('extends the default roots with the real paths of existing folders; --mount-root-only replaces them', async () => {
    await mkdir(join(dir, 'real'));
    await mkdir(join(dir, 'home'));
    await symlink(join(dir, 'real'), join(dir, 'link'));
    const home = join(dir, 'home');
    const defaults = [home, await realpath('/tmp'), '/work', '/data', '/scratch'];
    const real = async (p: string): Promise<string> => realpath(p).catch(() => p);
    const expected = await Promise.all(defaults.map(real));
    expect(await mountRootsFrom(undefined, false, home)).toEqual(expected);
    expect(await mountRootsFrom([], false, home)).toEqual(expected);
    expect(await mountRootsFrom([join(dir, 'link'), join(dir, 'real')], false, home)).toEqual([
      ...expected,
      join(dir, 'real'),
    ]);
    expect(await mountRootsFrom([join(dir, 'link'), join(dir, 'real')], true, home)).toEqual([
      join(dir, 'real'),
      join(dir, 'real'),
    ]);
    const err: unknown = await mountRootsFrom([], true, home).catch((e: unknown) => e);
    expect(err).toMatchObject({
      code: 'E_USAGE',
      issues: [
        {
          path: '--mount-root-only',
          rule: expect.stringMatching(/needs at least one --mount-root/) as string,
        },
      ],
    });
  });

  it('refuses a missing folder, a file and / with exit 2, naming the flag and its position', async () => {
    await writeFile(join(dir, 'file'), 'x');
    for (const [values, path, rule] of [
      [[join(dir, 'missing')], '--mount-root[0]', /must be an existing folder/],
      [[dir, join(dir, 'file')], '--mount-root[1]', /must be an existing folder/],
      [['/'], '--mount-root[0]', /must not be \//],
    ] as const) {
      const err: unknown = await mountRootsFrom(values).catch((e: unknown) => e);
      expect(err).toMatchObject({
        code: 'E_USAGE',
        exitCode: 2,
        issues: [{ path, rule: expect.stringMatching(rule) as string }],
      });
    }
  });
});

describe("every user's home from the password database", () => {
  it('keeps absolute homes other than /, once each; skips comments and short lines', () => {
    const text = [
      'root:x:0:0:root:/root:/bin/bash',
      'daemon:x:1:1::/usr/sbin:/usr/sbin/nologin',
      'sync:x:4:65534:sync:/bin:/bin/sync',
      '# comment:x:0:0::/etc:',
      'svc:x:999:999::/:/sbin/nologin',
      'ann:x:1000:1000::/home/ann:/bin/sh',
      'twin:x:1001:1001::/home/ann:/bin/sh',
      'bad:x',
      'rel:x:1:1::relative:/bin/sh',
      '',
    ].join('\n');
    expect(parsePasswdHomes(text)).toEqual(['/root', '/usr/sbin', '/bin', '/home/ann']);
  });
});
