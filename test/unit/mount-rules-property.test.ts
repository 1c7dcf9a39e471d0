import { realpathSync } from 'node:fs';
import { mkdir, mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { jobPathIssues, resolveProtected } from '../../src/app/job-paths.js';
import { checkFolder, MountRefusedError } from '../../src/app/mount-walk.js';
import { checkMounts, isWithin, type ProtectedPaths } from '../../src/core/mount-policy.js';
import { seededRandom } from '../support/seeded-random.js';

/**
 * The mount rules as a property (issue 22): random paths over a real folder tree full of links (to /, /etc, /usr,
 * /proc/self, the protected folders of the tree, upwards, relative, in loops), `..` and `.` segments, and missing
 * names. Whatever the start-time check (`jobPathIssues`) or the launch-time guard (`checkFolder` + the rules)
 * accepts must, resolved by the kernel (realpath(3) of the longest existing prefix, not by text), be no protected
 * real path; the guard's path must moreover be link-free (its own real path).
 */
const fs = new NodeFileSystem();
let root: string;
let rules: ProtectedPaths;
/** Real paths no accepted mount may be, lie inside or (for `contain`) contain. */
let forbiddenInside: string[];
let forbiddenContain: string[];

const SYSTEM = [
  '/etc',
  '/usr',
  '/proc',
  '/sys',
  '/dev',
  '/run',
  '/bin',
  '/sbin',
  '/boot',
  '/root',
  '/var/lib/docker',
  '/var/lib/containerd',
];

beforeAll(async () => {
  root = realpathSync.native(await mkdtemp(join(tmpdir(), 'rg-mount-prop-')));
  for (const d of [
    'work/a/b',
    'work/c',
    'prot/out/jobs',
    'prot/data-root/overlay2',
    'home/u/.config/gcloud',
    'home/u/proj',
    'keys/.ssh',
  ])
    await mkdir(join(root, d), { recursive: true });
  const links: [string, string][] = [
    ['work/l-root', '/'],
    ['work/l-etc', '/etc'],
    ['work/l-usr', '/usr/bin'],
    ['work/l-proc', '/proc/self'],
    ['work/l-out', join(root, 'prot/out')],
    ['work/a/l-up', '..'],
    ['work/a/l-upup', '../..'],
    ['work/a/b/l-home', join(root, 'home/u')],
    ['work/c/l-rel', '../../prot'],
    ['work/c/l-data', '../../prot/data-root'],
    ['work/loop1', 'loop2'],
    ['work/loop2', 'loop1'],
    ['work/l-dangling', join(root, 'nowhere')],
    ['work/l-ssh', join(root, 'keys/.ssh')],
    ['home/u/proj/l-config', '../.config'],
  ];
  for (const [at, target] of links) await symlink(target, join(root, at));
  const out = join(root, 'prot/out');
  const dataRoot = join(root, 'prot/data-root');
  const home = join(root, 'home/u');
  rules = { outputDir: out, ownedDirs: [dataRoot], homeDirs: [home] };
  forbiddenInside = [...SYSTEM, out, dataRoot, join(home, '.config'), join(root, 'keys/.ssh')];
  forbiddenContain = [out, dataRoot, home, '/etc', '/usr', '/proc'];
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

const NAMES = [
  'work',
  'a',
  'b',
  'c',
  'prot',
  'out',
  'data-root',
  'home',
  'u',
  'proj',
  '.config',
  'gcloud',
  'keys',
  '.ssh',
  'jobs',
  'overlay2',
  '.',
  '',
  'new',
  'etc',
  'usr',
];
const LINKS = [
  'l-root',
  'l-etc',
  'l-usr',
  'l-proc',
  'l-out',
  'l-up',
  'l-upup',
  'l-home',
  'l-rel',
  'l-data',
  'loop1',
  'loop2',
  'l-dangling',
  'l-ssh',
  'l-config',
];

function pick<T>(random: () => number, from: readonly T[]): T {
  return from[Math.floor(random() * from.length)]!;
}

/** Links 40 %, `..` 30 %, names 30 %, from the tree's root, its link-rich `work/`, or `/`. */
function randomPath(random: () => number): string {
  const r = random();
  const start = r < 0.45 ? root : r < 0.9 ? join(root, 'work') : '/';
  const n = 1 + Math.floor(random() * 5);
  const parts: string[] = [];
  for (let i = 0; i < n; i++) {
    const kind = random();
    parts.push(kind < 0.4 ? pick(random, LINKS) : kind < 0.7 ? '..' : pick(random, NAMES));
  }
  return `${start}/${parts.join('/')}`;
}

/** The kernel's answer: realpath(3) of the longest existing prefix of the raw string, the missing rest appended. */
function kernelReal(path: string): string | null {
  try {
    return realpathSync.native(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'ENOENT' && code !== 'ENOTDIR') return null;
    const parent = dirname(path);
    if (parent === path) return null;
    const up = kernelReal(parent);
    return up === null ? null : join(up, basename(path));
  }
}

function violation(real: string): string | null {
  if (real === '/') return '/';
  const inside = forbiddenInside.find((p) => isWithin(real, p));
  if (inside !== undefined) return `inside ${inside}`;
  if (/^\/lib[^/]*(\/|$)/.test(real)) return 'inside /lib*';
  const contains = forbiddenContain.find((p) => isWithin(p, real));
  return contains === undefined ? null : `contains ${contains}`;
}

describe('mount rules over random paths with links, "..", loops and protected prefixes (seeded)', () => {
  it('the start check never accepts a path whose real path is protected', async () => {
    const random = seededRandom(22_0001);
    let accepted = 0;
    for (let i = 0; i < 3000; i++) {
      const cwd = randomPath(random);
      const issues = await jobPathIssues(
        fs,
        [{ prefix: 'jobs[0]', cwd, outcome_path: join(root, 'work', 'outs', 'o.json') }],
        rules,
      );
      if (issues.some((x) => x.path === 'jobs[0].cwd')) continue;
      accepted++;
      const real = kernelReal(cwd);
      expect(real, `${cwd} accepted but the kernel cannot resolve it`).not.toBeNull();
      expect(violation(real!), `${cwd} → ${real}`).toBeNull();
    }
    // The generator reaches both sides: some paths pass, most are refused.
    expect(accepted).toBeGreaterThan(50);
    expect(accepted).toBeLessThan(3000);
  });

  it('the launch guard accepts only link-free paths whose real path is not protected', async () => {
    const random = seededRandom(22_0002);
    const resolved = await resolveProtected(fs, rules);
    let accepted = 0;
    for (let i = 0; i < 3000; i++) {
      const cwd = randomPath(random);
      let path: string;
      try {
        path = (await checkFolder(fs, cwd, 'cwd', { create: true })).path;
      } catch (err) {
        expect(err).toBeInstanceOf(MountRefusedError);
        continue;
      }
      if (checkMounts([{ field: 'cwd', hostPath: path }], resolved).length > 0) continue;
      accepted++;
      expect(realpathSync.native(path), `${cwd}: the guard's path holds a link`).toBe(path);
      expect(violation(path), `${cwd} → ${path}`).toBeNull();
      expect(violation(kernelReal(cwd)!), `${cwd} as the engine would have resolved it`).toBeNull();
    }
    expect(accepted).toBeGreaterThan(50);
  });
});
