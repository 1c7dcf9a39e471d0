import {
  chmod,
  rename,
  chown,
  mkdir,
  mkdtemp,
  readFile,
  readdir,
  rm,
  stat,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  FileImageSessionsMemo,
  imageSessionsCacheFile,
} from '../../../../src/adapters/fs/image-sessions-file.js';

const A = `sha256:${'a'.repeat(64)}`;
const B = `sha256:${'b'.repeat(64)}`;
let dir: string;
let file: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-image-sessions-'));
  file = join(dir, 'image-sessions.json');
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('FileImageSessionsMemo (the sessions-copy skip kept between processes)', () => {
  it('what one process learned, the next one knows; the file is 0600 and holds ids, paths and contents only', async () => {
    const first = new FileImageSessionsMemo(file);
    expect(first.get(A, '/root/.codex/sessions')).toBeUndefined();
    first.learn(A, '/root/.codex/sessions', 'absent');
    first.learn(B, '/s', 'empty');
    const next = new FileImageSessionsMemo(file);
    expect(next.get(A, '/root/.codex/sessions/')).toBe('absent');
    expect(next.get(B, '/s')).toBe('empty');
    expect(next.get(B, '/root/.codex/sessions')).toBeUndefined();
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    expect(JSON.parse(await readFile(file, 'utf8'))).toEqual({
      schema: 'roboguide.image-sessions/v1',
      images: [
        { imageId: A, dir: '/root/.codex/sessions', content: 'absent' },
        { imageId: B, dir: '/s', content: 'empty' },
      ],
    });
    expect((await readdir(dir)).sort()).toEqual(['image-sessions.json']); // no temp file left
  });

  it('learning what is already known does not rewrite the file', async () => {
    new FileImageSessionsMemo(file).learn(A, '/s', 'empty');
    const before = await stat(file);
    await new Promise((resolve) => setTimeout(resolve, 20));
    new FileImageSessionsMemo(file).learn(A, '/s', 'empty');
    expect((await stat(file)).mtimeMs).toBe(before.mtimeMs);
  });

  it("another process's entries written meanwhile are kept when this one writes", () => {
    const one = new FileImageSessionsMemo(file);
    const two = new FileImageSessionsMemo(file);
    expect(one.get(A, '/s')).toBeUndefined(); // both loaded the (missing) file
    expect(two.get(B, '/s')).toBeUndefined();
    one.learn(A, '/s', 'empty');
    two.learn(B, '/s', 'absent');
    const third = new FileImageSessionsMemo(file);
    expect(third.get(A, '/s')).toBe('empty');
    expect(third.get(B, '/s')).toBe('absent');
  });

  it('a malformed file or entry is not used: wrong schema, not JSON, a tag instead of an id, a relative path', async () => {
    await writeFile(file, 'not json');
    expect(new FileImageSessionsMemo(file).get(A, '/s')).toBeUndefined();
    await writeFile(
      file,
      JSON.stringify({ schema: 'other', images: [{ imageId: A, dir: '/s', content: 'empty' }] }),
    );
    expect(new FileImageSessionsMemo(file).get(A, '/s')).toBeUndefined();
    await writeFile(
      file,
      JSON.stringify({
        schema: 'roboguide.image-sessions/v1',
        images: [
          { imageId: 'roboguide/pair-driver:1', dir: '/s', content: 'empty' },
          { imageId: A, dir: 's', content: 'empty' },
          { imageId: A, dir: '/t', content: 'full' },
          { imageId: B, dir: '/s', content: 'absent' },
          null,
        ],
      }),
    );
    const memo = new FileImageSessionsMemo(file);
    expect(memo.get(A, '/s')).toBeUndefined();
    expect(memo.get(A, '/t')).toBeUndefined();
    expect(memo.get(B, '/s')).toBe('absent');
  });

  it('a file it cannot write (its folder gone) leaves a memo of this process only, without an error', async () => {
    const gone = join(dir, 'gone');
    const memo = new FileImageSessionsMemo(join(gone, 'image-sessions.json'));
    await rm(gone, { recursive: true });
    expect(() => memo.learn(A, '/s', 'empty')).not.toThrow();
    expect(memo.get(A, '/s')).toBe('empty');
    expect(await readdir(dir)).toEqual([]);
    const none = new FileImageSessionsMemo(null);
    none.learn(A, '/s', 'absent');
    expect(none.get(A, '/s')).toBe('absent');
  });
});

describe('FileImageSessionsMemo: only a file of ours is read (what it says skips copies of evidence)', () => {
  const known = JSON.stringify({
    schema: 'roboguide.image-sessions/v1',
    images: [{ imageId: A, dir: '/root/.codex/sessions', content: 'empty' }],
  });

  it('a file others can write, a link to a file, or one another user owns is not read', async () => {
    await writeFile(file, known, { mode: 0o600 });
    expect(new FileImageSessionsMemo(file).get(A, '/root/.codex/sessions')).toBe('empty'); // ours: read
    await chmod(file, 0o666);
    expect(new FileImageSessionsMemo(file).get(A, '/root/.codex/sessions')).toBeUndefined();
    await chmod(file, 0o600);
    const elsewhere = join(dir, 'elsewhere.json');
    await writeFile(elsewhere, known, { mode: 0o600 });
    const linked = join(dir, 'linked.json');
    await symlink(elsewhere, linked);
    expect(new FileImageSessionsMemo(linked).get(A, '/root/.codex/sessions')).toBeUndefined();
    if (process.getuid?.() !== 0) return; // chown to another user needs root
    await chown(file, 65534, 65534);
    expect(new FileImageSessionsMemo(file).get(A, '/root/.codex/sessions')).toBeUndefined();
  });
});

describe('FileImageSessionsMemo: its folder made 0700 and held, reached from / through folders only root and we can change', () => {
  const known = JSON.stringify({
    schema: 'roboguide.image-sessions/v1',
    images: [{ imageId: A, dir: '/root/.codex/sessions', content: 'empty' }],
  });

  it('makes the missing folders 0700 and keeps reading and writing in the folder it opened, whatever is renamed on the path later', async () => {
    const cached = join(dir, 'xdg', 'roboguide-eval', 'image-sessions.json');
    const memo = new FileImageSessionsMemo(cached);
    expect((await stat(join(dir, 'xdg', 'roboguide-eval'))).mode & 0o777).toBe(0o700);
    // The folder moved away and another, holding a planted file, put at its path: the memo neither reads nor writes there.
    await rename(join(dir, 'xdg', 'roboguide-eval'), join(dir, 'moved'));
    await mkdir(join(dir, 'xdg', 'roboguide-eval'), { mode: 0o700 });
    await writeFile(cached, known, { mode: 0o600 });
    expect(memo.get(A, '/root/.codex/sessions')).toBeUndefined();
    memo.learn(B, '/s', 'empty');
    expect(await readFile(cached, 'utf8')).toBe(known);
    expect(JSON.parse(await readFile(join(dir, 'moved', 'image-sessions.json'), 'utf8')).images).toEqual([
      { imageId: B, dir: '/s', content: 'empty' },
    ]);
  });

  it("neither reads nor writes where another user could change the file: a folder others can write above it (not sticky), ours open to others, a link, or another user's", async () => {
    const cases: [string, string][] = [];
    const open = join(dir, 'open');
    await mkdir(join(open, 'roboguide-eval'), { recursive: true, mode: 0o700 });
    await chmod(open, 0o777);
    cases.push(['an ancestor others can write', open]);
    const loose = join(dir, 'loose');
    await mkdir(join(loose, 'roboguide-eval'), { recursive: true });
    await chmod(join(loose, 'roboguide-eval'), 0o777);
    cases.push(['our folder writable by others', loose]);
    const linked = join(dir, 'linked');
    await mkdir(linked);
    await mkdir(join(dir, 'target'), { mode: 0o700 });
    await symlink(join(dir, 'target'), join(linked, 'roboguide-eval'));
    cases.push(['a link', linked]);
    if (process.getuid?.() === 0) {
      const theirs = join(dir, 'theirs');
      await mkdir(join(theirs, 'roboguide-eval'), { recursive: true, mode: 0o700 });
      await chown(theirs, 65534, 65534);
      cases.push(["another user's folder above", theirs]);
    }
    for (const [what, base] of cases) {
      const cached = join(base, 'roboguide-eval', 'image-sessions.json');
      await writeFile(cached, known, { mode: 0o600 });
      const memo = new FileImageSessionsMemo(cached);
      expect(memo.get(A, '/root/.codex/sessions'), what).toBeUndefined();
      memo.learn(B, '/s', 'absent');
      expect(await readFile(cached, 'utf8'), what).toBe(known);
    }
  });
});

describe('imageSessionsCacheFile', () => {
  it('$XDG_CACHE_HOME when absolute, else ~/.cache; null without a home', () => {
    const xdg = join(dir, 'xdg');
    expect(imageSessionsCacheFile({ XDG_CACHE_HOME: xdg, HOME: '/nowhere' })).toBe(
      join(xdg, 'roboguide-eval', 'image-sessions.json'),
    );
    expect(imageSessionsCacheFile({ XDG_CACHE_HOME: 'relative', HOME: dir })).toBe(
      join(dir, '.cache', 'roboguide-eval', 'image-sessions.json'),
    );
    expect(imageSessionsCacheFile({})).toBeNull();
    // A home where no folder can be made: a memo of the process only.
    const memo = new FileImageSessionsMemo(imageSessionsCacheFile({ HOME: '/proc' }));
    memo.learn(A, '/s', 'empty');
    expect(memo.get(A, '/s')).toBe('empty');
  });
});
