import { describe, expect, it } from 'vitest';
import { checkMounts, isWithin, normalizeAbsolute, type ProtectedPaths } from '../../src/core/mount-policy.js';

const PROTECTED: ProtectedPaths = {
  outputDir: '/srv/batches/b1',
  registryPath: '/var/state/rg/registry.db',
  homeDir: '/home/eval',
  engineSocketPaths: ['/srv/engine/docker.sock'],
};

function messagesFor(hostPath: string, p: ProtectedPaths = PROTECTED): string[] {
  return checkMounts([{ field: 'jobs[0].cwd', hostPath }], p).map((i) => i.message);
}

describe('checkMounts', () => {
  it('allows an ordinary work folder, one inside $HOME, and a sibling of the output directory', () => {
    expect(checkMounts([
      { field: 'jobs[0].cwd', hostPath: '/srv/work/p1' },
      { field: 'jobs[0].outcome_path', hostPath: '/home/eval/out' },
      { field: 'jobs[1].cwd', hostPath: '/srv/batches/b10' },
      { field: 'jobs[2].cwd', hostPath: '/var/state/rg-other' },
    ], PROTECTED)).toEqual([]);
  });

  it('refuses the output directory, a folder containing it, and one inside it', () => {
    expect(messagesFor('/srv/batches/b1')).toEqual([expect.stringMatching(/output directory \/srv\/batches\/b1/)]);
    expect(messagesFor('/srv/batches')).toEqual([expect.stringMatching(/must not contain the output directory/)]);
    expect(messagesFor('/srv/batches/b1/jobs/p2')).toEqual([expect.stringMatching(/must not lie inside the output directory/)]);
  });

  it('refuses the registry database and any folder holding it', () => {
    expect(messagesFor('/var/state/rg')).toEqual([expect.stringMatching(/registry database \/var\/state\/rg\/registry\.db/)]);
    expect(messagesFor('/var/state/rg/registry.db')).toEqual([expect.stringMatching(/registry database/)]);
    expect(messagesFor('/var')).toContain(messagesFor('/var/state/rg')[0]);
  });

  it('refuses /, the system folders (themselves, inside and above) and the engine socket', () => {
    expect(messagesFor('/')[0]).toMatch(/must not be \//);
    for (const path of ['/etc', '/etc/ssl', '/proc', '/proc/1/root', '/sys', '/dev', '/run', '/run/containerd', '/var/run', '/var/lib/docker', '/var/lib/docker/volumes/x', '/var/lib']) {
      expect(messagesFor(path).join('\n'), path).toMatch(/system folder/);
    }
    expect(messagesFor('/srv/engine')).toEqual([expect.stringMatching(/engine socket \/srv\/engine\/docker\.sock/)]);
    expect(messagesFor('/srv/engine/docker.sock')).toEqual([expect.stringMatching(/engine socket/)]);
  });

  it('refuses $HOME itself and a folder containing it, not a folder inside it', () => {
    expect(messagesFor('/home/eval')).toEqual([expect.stringMatching(/home folder \/home\/eval/)]);
    expect(messagesFor('/home')).toEqual([expect.stringMatching(/home folder/)]);
    expect(messagesFor('/home/eval/work')).toEqual([]);
    expect(messagesFor('/home/evaluation')).toEqual([]);
  });

  it('names the field of every problem and reports all of them', () => {
    const issues = checkMounts(
      [
        { field: 'jobs[0].cwd', hostPath: '/srv' },
        { field: 'jobs[3].outcome_path', hostPath: '/etc' },
      ],
      PROTECTED,
    );
    expect(issues.map((i) => i.field)).toEqual(['jobs[0].cwd', 'jobs[0].cwd', 'jobs[3].outcome_path']);
  });

  it('compares normalized paths (trailing slashes, dot segments) and only what it is given', () => {
    expect(messagesFor('/srv/batches/b1/')).not.toEqual([]);
    expect(messagesFor('/srv/x/../batches/./b1')).not.toEqual([]);
    expect(checkMounts([{ field: 'cwd', hostPath: '/srv/batches/b1' }], {})).toEqual([]);
    expect(checkMounts([{ field: 'cwd', hostPath: 'relative' }], {})).toEqual([{ field: 'cwd', message: expect.stringMatching(/absolute/) as string }]);
  });
});

describe('path helpers', () => {
  it('normalizes and compares by whole segments', () => {
    expect(normalizeAbsolute('//a/./b//c/../')).toBe('/a/b');
    expect(normalizeAbsolute('/')).toBe('/');
    expect(isWithin('/a/b', '/a')).toBe(true);
    expect(isWithin('/ab', '/a')).toBe(false);
    expect(isWithin('/a', '/')).toBe(true);
  });
});
