import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { iptablesRunner } from '../../../src/adapters/docker/docker-pair-network.js';

/**
 * The pairs network's guard lists the firewall through the process's tool shell (issue 39): `iptables` is a child of
 * that shell, not a fork of this process, and what it prints comes back as it was written. Watched with a prefix
 * program of the test's (the place the real runner puts `nsenter`), which records its parent and answers like
 * `iptables -S` would.
 */
let dir: string;
let prefix: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-iptables-runner-'));
  prefix = join(dir, 'recorder');
  await writeFile(
    prefix,
    [
      '#!/bin/sh',
      `cat /proc/$PPID/comm > ${join(dir, 'parent')}`,
      `printf '%s\\n' "$@" > ${join(dir, 'args')}`,
      `printf '%s' "$LC_ALL" > ${join(dir, 'locale')}`,
      'printf -- "-P INPUT ACCEPT\\n-N ROBOGUIDE-PAIRS\\n-A FORWARD -m comment --comment \\"two  words\\" -j ROBOGUIDE-PAIRS\\n"',
      'echo "# Warning: iptables-legacy tables present" >&2',
      'exit 0',
    ].join('\n'),
  );
  await chmod(prefix, 0o755);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe.skipIf(process.platform !== 'linux')('the iptables runner', () => {
  it('runs iptables -w as a child of the tool shell, with C messages, and gives back its output as written', async () => {
    const result = await iptablesRunner([prefix])('ipv4', ['-S']);
    expect(result).toEqual({
      code: 0,
      stdout:
        '-P INPUT ACCEPT\n-N ROBOGUIDE-PAIRS\n-A FORWARD -m comment --comment "two  words" -j ROBOGUIDE-PAIRS\n',
      stderr: '# Warning: iptables-legacy tables present',
    });
    expect((await readFile(join(dir, 'parent'), 'utf8')).trim()).toBe('sh');
    expect((await readFile(join(dir, 'args'), 'utf8')).split('\n')).toEqual([
      expect.stringMatching(/\/iptables$/),
      '-w',
      '-S',
      '',
    ]);
    expect(await readFile(join(dir, 'locale'), 'utf8')).toBe('C');
  });

  it('ipv6 is ip6tables, and a word the shell would split goes to a process of its own, answered the same', async () => {
    const result = await iptablesRunner([prefix])('ipv6', ['-S', 'a chain']);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('-N ROBOGUIDE-PAIRS\n');
    expect((await readFile(join(dir, 'parent'), 'utf8')).trim()).not.toBe('sh');
    expect((await readFile(join(dir, 'args'), 'utf8')).split('\n').slice(0, 3)).toEqual([
      expect.stringMatching(/\/ip6tables$/),
      '-w',
      '-S',
    ]);
  });
});
