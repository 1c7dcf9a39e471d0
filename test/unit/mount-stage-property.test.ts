import { spawn, type ChildProcess } from 'node:child_process';
import { fstatSync, readdirSync, readlinkSync, realpathSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { ProcFdMountStager } from '../../src/adapters/mount/proc-fd-stager.js';
import { stageFolder } from '../../src/app/mount-stage.js';
import { checkFolder, MountRefusedError } from '../../src/app/mount-walk.js';
import type { OpenedFolder } from '../../src/app/ports/mount-stager.js';
import { seededRandom } from '../support/seeded-random.js';

/**
 * Staged mounts as a property (containment round two): random trees of folders, links (to a folder outside the
 * sources standing for the host, to `/`, to siblings, upwards) and missing names, while a second process swaps
 * folders for links and renames subtrees in a loop. Whatever stageFolder accepts, the object it would bind (the
 * folder its descriptor holds at the bind) is a folder inside the sources' tree, never the outside folder nor `/`,
 * and it is the very folder the checks ran on. The same adversary redirects the walked mode's path (today's
 * hand-over of a path the engine resolves later) within the loop: the property has teeth.
 */

const TRIES = 400;
const NAMES = ['a', 'b', 'c'];
let root: string;
let ws: string;
let outside: string;
let swapper: ChildProcess;

/** Where the descriptor's folder is now (`(deleted)` stripped) and which folder it is. */
interface Bound {
  readonly where: string;
  readonly id: string;
  readonly checkedId: string;
}

/** The real openat steps; `bind` only records the object it was given (no mount: no privilege needed). */
class RecordingStager extends ProcFdMountStager {
  last: { where: string; id: string } | null = null;
  override bind(folder: OpenedFolder): Promise<string> {
    const where = readlinkSync(`/proc/self/fd/${folder.handle}`).replace(/ \(deleted\)$/, '');
    const s = fstatSync(folder.handle);
    this.last = { where, id: `${s.dev}:${s.ino}` };
    return Promise.resolve('/staged');
  }
}

function randomTree(random: () => number, dir: string, depth: number, jobs: Promise<void>[]): void {
  for (const name of NAMES) {
    const path = join(dir, name);
    const roll = random();
    if (roll < 0.5 && depth < 3) {
      jobs.push(mkdir(path).then(() => randomTree(random, path, depth + 1, jobs)));
    } else if (roll < 0.65) jobs.push(symlink(outside, path));
    else if (roll < 0.75) jobs.push(symlink('/', path));
    else if (roll < 0.85) jobs.push(symlink('..', path));
    else if (roll < 0.92) jobs.push(symlink(NAMES[(NAMES.indexOf(name) + 1) % 3] ?? 'a', path));
  }
}

function randomPath(random: () => number): string {
  const depth = 1 + Math.floor(random() * 3);
  const parts = Array.from({ length: depth }, () => NAMES[Math.floor(random() * 3)] ?? 'a');
  return join(ws, ...parts);
}

/** The adversary: folders become links to the outside folder or `/` and back, subtrees are renamed, in a loop. */
function startSwapper(): ChildProcess {
  const script = [
    'cd "$1" || exit 1',
    'while :; do',
    '  for p in a b c a/a a/b b/a b/b c/a a/a/a b/b/b; do',
    '    t="$2"; [ "${p#c}" != "$p" ] && t=/',
    '    if [ -L "$p" ]; then rm -f "$p"; mkdir "$p" 2>/dev/null;',
    '    elif [ -d "$p" ]; then mv -T "$p" "$p.x" 2>/dev/null && { ln -s "$t" "$p"; rm -rf "$p.x"; };',
    '    else mkdir "$p" 2>/dev/null; fi',
    '  done',
    '  mv -T a z 2>/dev/null; mv -T b a 2>/dev/null; mv -T z b 2>/dev/null',
    'done',
  ].join('\n');
  return spawn('/bin/sh', ['-c', script, 'swapper', ws, outside], { stdio: 'ignore', detached: true });
}

describe('staged mounts under a concurrent swapper (property)', () => {
  beforeAll(async () => {
    root = realpathSync(await mkdtemp(join(tmpdir(), 'rg-stage-prop-')));
    ws = join(root, 'ws');
    outside = join(root, 'outside');
    await mkdir(outside);
    await writeFile(join(outside, 'secret'), 'host');
    await mkdir(ws);
    const jobs: Promise<void>[] = [];
    randomTree(seededRandom(7), ws, 0, jobs);
    for (let i = 0; i < jobs.length; i++) await jobs[i];
    swapper = startSwapper();
  });
  afterAll(async () => {
    if (swapper.pid !== undefined) process.kill(-swapper.pid, 'SIGKILL');
    await new Promise((resolve) => setTimeout(resolve, 50));
    await rm(root, { recursive: true, force: true });
  });

  it(`whatever is staged is the checked folder, inside the sources (${TRIES} tries)`, async () => {
    const random = seededRandom(42);
    const stager = new RecordingStager({
      root: join(root, 'staging'),
      referencedSources: () => Promise.resolve(new Set()),
    });
    const outsideId = idOf(outside);
    const rootId = idOf('/');
    let staged = 0;
    let refused = 0;
    const fdsBefore = readdirSync('/proc/self/fd').length;
    for (let i = 0; i < TRIES; i++) {
      stager.last = null;
      const path = randomPath(random);
      const source = await stageFolder(stager, path, 'cwd', { create: random() < 0.5, readOnly: true }).catch(
        (err: unknown) => {
          if (!(err instanceof MountRefusedError)) throw err;
          expect(err.field).toBe('cwd');
          refused++;
          return null;
        },
      );
      if (source === null) continue;
      staged++;
      const bound = stager.last as Bound | null;
      expect(bound).not.toBeNull();
      if (bound === null) continue;
      expect(bound.where === ws || bound.where.startsWith(`${ws}/`), `${path} staged ${bound.where}`).toBe(
        true,
      );
      expect(bound.id).not.toBe(outsideId);
      expect(bound.id).not.toBe(rootId);
      expect(bound.id).toBe(source.checked.fileId);
    }
    console.log(`staged property, ${TRIES} tries: staged ${staged}, refused ${refused}`);
    // Every folder opened on the way was closed, staged or refused.
    expect(readdirSync('/proc/self/fd').length).toBeLessThanOrEqual(fdsBefore);
    expect(staged).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);
  });

  it('the same adversary redirects a walked path resolved later, as an engine does (the property has teeth)', async () => {
    const random = seededRandom(43);
    const fs = new NodeFileSystem();
    let redirected = 0;
    let tries = 0;
    for (let i = 0; i < 1000 && redirected === 0; i++) {
      tries++;
      const checked = await checkFolder(fs, randomPath(random), 'cwd', { create: false }).catch(() => null);
      if (checked === null) continue;
      // An engine resolves the path later (create, then start: tens of milliseconds here).
      await new Promise((resolve) => setTimeout(resolve, 25));
      const later = (() => {
        try {
          return realpathSync(checked.path);
        } catch {
          return null;
        }
      })();
      if (later !== null && !(later === ws || later.startsWith(`${ws}/`))) redirected++;
    }
    console.log(`walked contrast: redirected after ${tries} tries`);
    expect(redirected).toBeGreaterThan(0);
  });
});

function idOf(path: string): string {
  const s = statSync(path);
  return `${s.dev}:${s.ino}`;
}
