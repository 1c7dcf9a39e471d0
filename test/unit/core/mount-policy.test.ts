import { describe, expect, it } from 'vitest';
import {
  checkMounts,
  credentialComponent,
  DEFAULT_MOUNT_ROOTS,
  defaultMountRoots,
  resolveProtectedPaths,
  isWithin,
  normalizeAbsolute,
  type ProtectedPaths,
} from '../../../src/core/mount-policy.js';

const PROTECTED: ProtectedPaths = {
  outputDir: '/srv/batches/b1',
  registryPath: '/var/state/rg/registry.db',
  homeDir: '/home/eval',
  engineSocketPaths: ['/srv/engine/docker.sock'],
  // Roots wide enough that these tests see the protected-place rules alone (the allowlist has its own tests).
  mountRoots: ['/srv', '/var', '/home', '/root', '/data'],
};

function messagesFor(hostPath: string, p: ProtectedPaths = PROTECTED): string[] {
  return checkMounts([{ field: 'jobs[0].cwd', hostPath }], p).map((i) => i.message);
}

describe('checkMounts', () => {
  it('allows an ordinary work folder, one inside $HOME, and a sibling of the output directory', () => {
    expect(
      checkMounts(
        [
          { field: 'jobs[0].cwd', hostPath: '/srv/work/p1' },
          { field: 'jobs[0].outcome_path', hostPath: '/home/eval/out' },
          { field: 'jobs[1].cwd', hostPath: '/srv/batches/b10' },
          { field: 'jobs[2].cwd', hostPath: '/var/state/rg-other' },
        ],
        PROTECTED,
      ),
    ).toEqual([]);
  });

  it('refuses the output directory, a folder containing it, and one inside it', () => {
    expect(messagesFor('/srv/batches/b1')).toEqual([
      expect.stringMatching(/output directory \/srv\/batches\/b1/),
    ]);
    expect(messagesFor('/srv/batches')).toEqual([
      expect.stringMatching(/must not contain the output directory/),
    ]);
    expect(messagesFor('/srv/batches/b1/jobs/p2')).toEqual([
      expect.stringMatching(/must not lie inside the output directory/),
    ]);
  });

  it('refuses the registry database and any folder holding it', () => {
    expect(messagesFor('/var/state/rg')).toEqual([
      expect.stringMatching(/registry database \/var\/state\/rg\/registry\.db/),
    ]);
    expect(messagesFor('/var/state/rg/registry.db')).toEqual([expect.stringMatching(/registry database/)]);
    expect(messagesFor('/var')).toContain(messagesFor('/var/state/rg')[0]);
  });

  it('refuses /, the system folders (themselves, inside and above) and the engine socket', () => {
    expect(messagesFor('/')[0]).toMatch(/must not be \//);
    for (const path of [
      '/etc',
      '/etc/ssl',
      '/proc',
      '/proc/1/root',
      '/sys',
      '/dev',
      '/run',
      '/run/containerd',
      '/var/run',
      '/var/lib/docker',
      '/var/lib/docker/volumes/x',
      '/var/lib',
    ]) {
      expect(messagesFor(path).join('\n'), path).toMatch(/system folder/);
    }
    expect(messagesFor('/srv/engine')).toEqual([
      expect.stringMatching(/engine socket \/srv\/engine\/docker\.sock/),
    ]);
    expect(messagesFor('/srv/engine/docker.sock')).toEqual([expect.stringMatching(/engine socket/)]);
  });

  it('refuses $HOME itself and a folder containing it, not a folder inside it', () => {
    expect(messagesFor('/home/eval')).toEqual([expect.stringMatching(/home folder \/home\/eval/)]);
    expect(messagesFor('/home')).toEqual([
      expect.stringMatching(/home folder \/home\/eval/),
      expect.stringMatching(/home folder \/home /),
    ]);
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
    // /etc: the system folder and outside every root.
    expect(issues.map((i) => i.field)).toEqual([
      'jobs[0].cwd',
      'jobs[0].cwd',
      'jobs[3].outcome_path',
      'jobs[3].outcome_path',
    ]);
  });

  it('compares normalized paths (trailing slashes, dot segments) and only what it is given', () => {
    expect(messagesFor('/srv/batches/b1/')).not.toEqual([]);
    expect(messagesFor('/srv/x/../batches/./b1')).not.toEqual([]);
    expect(checkMounts([{ field: 'cwd', hostPath: '/tmp/batches/b1' }], {})).toEqual([]);
    expect(checkMounts([{ field: 'cwd', hostPath: 'relative' }], {})).toEqual([
      { field: 'cwd', message: expect.stringMatching(/absolute/) as string },
    ]);
  });
});

describe('checkMounts: the host rules of issue 22', () => {
  it("refuses the system folders the pair could rewrite or read: /usr, /bin, /sbin, every /lib*, /boot, containerd's root", () => {
    for (const path of [
      '/usr',
      '/usr/local/bin',
      '/usr/bin',
      '/bin',
      '/sbin',
      '/lib',
      '/lib64/x',
      '/libx32',
      '/lib32',
      '/boot',
      '/boot/grub',
      '/var/lib/containerd',
      '/var/lib/containerd/io.containerd.metadata.v1.bolt',
    ]) {
      expect(messagesFor(path).join('\n'), path).toMatch(/system folder/);
    }
    // Names that merely start alike are other folders; only a top-level lib* counts.
    expect(messagesFor('/srv/lib')).toEqual([]);
    expect(messagesFor('/usrdata', { ...PROTECTED, mountRoots: ['/usrdata'] })).toEqual([]);
  });

  it("refuses the engine's real data root and our own folders (be, contain or lie inside)", () => {
    const p: ProtectedPaths = { ownedDirs: ['/data/docker-root', '/srv/tokens'] };
    for (const path of [
      '/data/docker-root',
      '/data/docker-root/overlay2/x/merged',
      '/data',
      '/srv/tokens',
      '/srv/tokens/sub',
      '/srv',
    ]) {
      expect(messagesFor(path, p).join('\n'), path).toMatch(
        /engine's data, our own state or the code root runs/,
      );
    }
    expect(messagesFor('/data/work', p)).toEqual([]);
  });

  it("refuses every user's home and /root itself, and the hidden folders in one; a work folder inside stays allowed", () => {
    const p: ProtectedPaths = { ...PROTECTED, homeDirs: ['/var/lib/postgresql', '/srv/users/ann'] };
    for (const path of ['/root', '/var/lib/postgresql', '/srv/users', '/srv/users/ann', '/home']) {
      expect(messagesFor(path, p).join('\n'), path).toMatch(/home folder/);
    }
    for (const path of [
      '/root/.config',
      '/root/.ssh/keys',
      '/srv/users/ann/.local/share',
      '/home/eval/.cache',
    ]) {
      expect(messagesFor(path, p).join('\n'), path).toMatch(/hidden folder of the home folder|credential/);
    }
    expect(messagesFor('/root/work', p)).toEqual([]);
    expect(messagesFor('/srv/users/ann/projects/p1', p)).toEqual([]);
  });

  it('refuses a credential folder or credential-looking name anywhere in the path, not by base name only', () => {
    for (const path of [
      '/srv/.ssh',
      '/srv/.ssh/sub',
      '/srv/x/.gnupg',
      '/srv/.aws/cli',
      '/srv/.kube',
      '/srv/.docker/x',
      '/srv/.config/gcloud',
      '/srv/.config/gcloud/legacy',
      '/srv/secrets/id_rsa.d/x',
      '/srv/CREDENTIALS/work',
    ]) {
      expect(messagesFor(path).join('\n'), path).toMatch(/credential-looking/);
    }
    expect(credentialComponent('/srv/x/.gnupg/private')).toBe('/srv/x/.gnupg');
    expect(credentialComponent('/srv/gcloud')).toBeNull();
    expect(credentialComponent('/srv/work/p1')).toBeNull();
  });

  it('with --mount-root, refuses everything outside the roots, whatever else allows it', () => {
    const p: ProtectedPaths = { mountRoots: ['/srv/work', '/data/eval'] };
    expect(messagesFor('/srv/work', p)).toEqual([]);
    expect(messagesFor('/data/eval/p1', p)).toEqual([]);
    for (const path of ['/srv', '/srv/workshop', '/tmp/p1', '/data']) {
      expect(messagesFor(path, p).join('\n'), path).toMatch(
        /must lie under one of the allowed mount roots \(\/srv\/work, \/data\/eval; add one with --mount-root\)/,
      );
    }
    // A root never lifts another rule.
    expect(messagesFor('/srv/work/.ssh', p).join('\n')).toMatch(/credential/);
  });
});

describe('checkMounts: host mounts are an allowlist by default', () => {
  const home: ProtectedPaths = { homeDir: '/home/eval' };
  const rule =
    /must lie under one of the allowed mount roots \(\/home\/eval, \/tmp, \/work, \/data, \/scratch; add one with --mount-root\)/;

  it('refuses /var/lib/dpkg, /var/lib/systemd, /var/log, /opt, /srv and /var/tmp when no root is given, naming the rule and the allowlist', () => {
    expect(defaultMountRoots('/home/eval')).toEqual(['/home/eval', ...DEFAULT_MOUNT_ROOTS]);
    for (const path of ['/var/lib/dpkg', '/var/lib/systemd', '/var/log', '/opt', '/srv', '/var/tmp']) {
      for (const p of [home, { ...home, mountRoots: [] }]) {
        expect(messagesFor(path, p), path).toEqual([expect.stringMatching(rule)]);
      }
    }
    // Without a known home the default roots alone; a home of / adds nothing.
    expect(messagesFor('/opt/x', {})).toEqual([
      expect.stringMatching(/allowed mount roots \(\/tmp, \/work, \/data, \/scratch;/),
    ]);
    expect(defaultMountRoots('/')).toEqual([...DEFAULT_MOUNT_ROOTS]);
  });

  it("accepts a folder under a default root: /tmp, /work, /data, /scratch and the home's non-hidden subfolders", () => {
    for (const path of [
      '/tmp/eval/p1',
      '/work/p1',
      '/data/runs/r1',
      '/scratch/x',
      '/home/eval/projects/p1',
    ]) {
      expect(messagesFor(path, home), path).toEqual([]);
    }
    // The protected-place rules still apply inside a root: the home itself, its hidden folders, credentials.
    expect(messagesFor('/home/eval', home).join('\n')).toMatch(/home folder/);
    expect(messagesFor('/home/eval/.config/x', home).join('\n')).toMatch(/hidden folder/);
    expect(messagesFor('/work/.ssh', home).join('\n')).toMatch(/credential/);
    // Names that merely start alike lie under no root.
    expect(messagesFor('/tmpfoo', home)).toEqual([expect.stringMatching(rule)]);
  });

  it('resolves the default roots (real paths) when no root is given, and keeps given roots instead', async () => {
    const real = (path: string): Promise<string> =>
      path === '/tmp' ? Promise.resolve('/private/tmp') : Promise.reject(new Error('ENOENT'));
    const resolved = await resolveProtectedPaths({ homeDir: '/home/eval' }, real);
    expect(resolved.mountRoots).toEqual(['/home/eval', '/private/tmp', '/work', '/data', '/scratch']);
    const given = await resolveProtectedPaths({ homeDir: '/home/eval', mountRoots: ['/opt/eval'] }, real);
    expect(given.mountRoots).toEqual(['/opt/eval']);
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
