import { createReadStream } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { extract, pack } from 'tar-stream';
import { describe, expect, it } from 'vitest';
import { downloadTar } from '../../../../src/adapters/http/serve-files.js';
import { fileError, userParam, type FileTarget } from '../../../../src/adapters/http/serve-files-exec.js';
import { ApiError } from '../../../../src/app/serve/api-error.js';
import { containerPathProblem } from '../../../../src/app/serve/request-fields.js';
import type { ExecHandle, SessionEngine } from '../../../../src/app/ports/container-runtime.js';

/** What a failed file command in the container means for the API, from the messages busybox and GNU tools print. */
const target = (user = ''): FileTarget => ({
  engine: { exec: () => Promise.reject(new Error('no exec in this test')) } satisfies FileTarget['engine'],
  containerId: 'c',
  user,
  path: '/w/key-SECRET.txt',
  secrets: ['SECRET'],
});

describe('fileError', () => {
  it.each([
    ["cat: can't open '/w/x': No such file or directory", 404, 'E_FILE_NOT_FOUND'],
    ['tar: x: Cannot stat: No such file or directory', 404, 'E_FILE_NOT_FOUND'],
    ["cat: can't open '/data/f': Permission denied", 403, 'E_PERMISSION_DENIED'],
    ["mkdir: can't create directory '/ro/x': Read-only file system", 403, 'E_PERMISSION_DENIED'],
    ['/w/victim: Is a directory', 409, 'E_IS_A_DIRECTORY'],
    ['ls: /w/afile/x: Not a directory', 409, 'E_NOT_A_DIRECTORY'],
    ["mkdir: can't create directory '/w/afile': File exists", 409, 'E_NOT_A_DIRECTORY'],
    ['sh: tar: not found', 409, 'E_TOOL_MISSING'],
    ['bash: line 1: tar: command not found', 409, 'E_TOOL_MISSING'],
    ['unable to find user nosuch: no matching entries in passwd file', 400, 'E_USER_UNKNOWN'],
    ["sh: can't create /w/aaaa: File name too long", 400, 'E_PATH_TOO_LONG'],
    ['cat: read error: Input/output error', 422, 'E_FILE_UNUSABLE'],
    ['sh: write error: Input/output error', 422, 'E_FILE_UNUSABLE'],
    ["cat: can't open '/dev/tty': No such device or address", 422, 'E_FILE_UNUSABLE'],
    ["sh: can't create /w/loop: Too many levels of symbolic links", 422, 'E_FILE_UNUSABLE'],
    ['cat: write error: No space left on device', 507, 'E_CONTAINER_FULL'],
    ['tar: ./big: Cannot write: Disk quota exceeded', 507, 'E_CONTAINER_FULL'],
    ['bash: line 1: /w/x: Input/output error', 422, 'E_FILE_UNUSABLE'],
    // The engine's own words (an exec it could not start) are not the caller's path's fault.
    [
      'OCI runtime exec failed: exec failed: unable to start container process: invalid argument: unknown',
      500,
      'E_FILE_IO',
    ],
    ['Error response from daemon: no space left on device', 500, 'E_FILE_IO'],
    ['something else went wrong', 500, 'E_FILE_IO'],
  ] as const)('%s → %i %s', (stderr, status, code) => {
    const err = fileError(stderr, target('1000'));
    expect([err.status, err.code]).toEqual([status, code]);
  });

  it('the first line that says which wins, and the message names the user and never the secret', () => {
    const err = fileError('tar: ./a: Permission denied\ntar: ./b: No such file or directory', target('1000'));
    expect(err.code).toBe('E_PERMISSION_DENIED');
    expect(err.message).toContain('as user 1000');
    expect(err.message).not.toContain('SECRET');
  });
});

describe('containerPathProblem (a path in the container, before the container is asked)', () => {
  it.each([
    ['/w/file', null],
    ['relative/name', null],
    [`/${'x'.repeat(255)}`, null],
    [`/${'x'.repeat(256)}`, 'each name in the path must be at most 255 bytes (NAME_MAX)'],
    [`/${'é'.repeat(128)}`, 'each name in the path must be at most 255 bytes (NAME_MAX)'],
    [`/${'abc/'.repeat(1023)}`, null],
    [`/${'abcd/'.repeat(820)}`, 'must be at most 4095 bytes (PATH_MAX)'],
    ['', 'must be a non-empty path'],
    ['/w/a\0b', 'must not contain NUL'],
    ['/w/a\nb', 'must not contain a newline'],
  ])('%j → %s', (path, problem) => {
    expect(containerPathProblem(path)).toBe(problem);
  });
});

describe('userParam', () => {
  it('takes a name or uid with an optional group, refuses anything else naming the field', () => {
    expect(userParam(new URLSearchParams('user=1000:1000'))).toBe('1000:1000');
    expect(userParam(new URLSearchParams('user=www-data'))).toBe('www-data');
    expect(userParam(new URLSearchParams(''))).toBeUndefined();
    for (const bad of ['a b', '-x', '', 'a:b:c', '../x']) {
      expect(() => userParam(new URLSearchParams({ user: bad })), bad).toThrow(
        expect.objectContaining({ status: 400, issues: [expect.objectContaining({ path: 'user' })] }),
      );
    }
  });
});

/**
 * downloadTar against a hostile container: the fake engine's exec hands back a tar stream the test builds (what a
 * forged `/bin/sh`/`tar` in the container could print), so the re-pack's limits and name rules are seen directly.
 */
describe('downloadTar (hostile tar from the container)', () => {
  type Header = Parameters<ReturnType<typeof pack>['entry']>[0];
  interface FakeExec {
    readonly engine: FileTarget['engine'];
    killed(): boolean;
  }
  const fakeEngine = (stdout: Readable): FakeExec => {
    let killed = false;
    let finish: (code: number | null) => void = () => undefined;
    const done = new Promise<number | null>((resolve) => (finish = resolve));
    stdout.on('end', () => finish(0));
    stdout.on('close', () => finish(killed ? 137 : 0));
    const handle: ExecHandle = {
      stdout,
      stderr: Readable.from([]),
      done,
      killTree: () => {
        killed = true;
        stdout.destroy();
        return Promise.resolve();
      },
      abandon: () => stdout.destroy(),
    };
    const exec: SessionEngine['exec'] = () => Promise.resolve(handle);
    return { engine: { exec } satisfies FileTarget['engine'], killed: () => killed };
  };
  /** An endless tar of `make(i)` headers, produced only as fast as it is read; `pulled` counts them. */
  const endless = (make: (i: number) => Header): { stream: Readable; pulled: () => number } => {
    const archive = pack();
    let produced = 0;
    void (async () => {
      for (let i = 0; ; i += 1) {
        await new Promise<void>((resolve, reject) =>
          archive.entry(make(i), '', (err) => (err ? reject(err) : resolve())),
        );
        produced += 1;
        await new Promise((resolve) => setImmediate(resolve)); // let the reader run (an entry without data is written at once)
      }
    })().catch(() => undefined);
    return { stream: Readable.from(archive), pulled: () => produced };
  };
  const limits = { maxFiles: 200, maxFileBytes: 1024 * 1024, maxTotalBytes: 1024 * 1024 };
  const downloadTarget = (engine: FileTarget['engine']): FileTarget => ({
    engine,
    containerId: 'c',
    user: '',
    path: '/w',
    secrets: [],
  });

  async function expectTooLarge(make: (i: number) => Header, bound: number): Promise<void> {
    const tempRoot = await mkdtemp(join(tmpdir(), 'rg-dl-'));
    try {
      const source = endless(make);
      const fake = fakeEngine(source.stream);
      const err: unknown = await downloadTar(
        downloadTarget(fake.engine),
        tempRoot,
        () => new PassThrough(),
        undefined,
        limits,
      ).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ApiError);
      expect(err).toMatchObject({ status: 413, code: 'E_ARCHIVE_TOO_LARGE' });
      expect(fake.killed()).toBe(true);
      expect(source.pulled()).toBeLessThan(bound);
      expect(await readdir(tempRoot)).toEqual([]); // the spool is gone
    } finally {
      await rm(tempRoot, { recursive: true, force: true });
    }
  }

  it('counts symlink, directory and special headers against the entry limit and stops an endless stream (413)', async () => {
    const types = ['symlink', 'directory', 'fifo', 'character-device'] as const;
    await expectTooLarge(
      (i) => ({ name: `w/e${i}`, type: types[i % 4] ?? 'fifo', linkname: 'x', mode: 0o644 }),
      1000,
    );
  });

  it('counts names and link targets against the byte limit (413)', async () => {
    const long = 'n'.repeat(90);
    const target = 't/'.repeat(30_000); // a 60 KB link target (pax header)
    await expectTooLarge(
      (i) => ({ name: `w/${long}${i}`, type: 'symlink', linkname: target, mode: 0o777 }),
      100,
    );
  });

  it('drops names with `..` components or absolute names, keeps symlinks (targets as they are)', async () => {
    const tempRoot = await mkdtemp(join(tmpdir(), 'rg-dl-'));
    try {
      const archive = pack();
      const add = (h: Header, body = ''): Promise<void> =>
        new Promise((resolve, reject) => archive.entry(h, body, (err) => (err ? reject(err) : resolve())));
      await add({ name: 'w/ok.txt', type: 'file', size: 2, mode: 0o644 }, 'ok');
      await add({ name: '../evil.txt', type: 'file', size: 4, mode: 0o644 }, 'evil');
      await add({ name: 'w/../../up.txt', type: 'file', size: 2, mode: 0o644 }, 'up');
      await add({ name: '/etc/abs.txt', type: 'file', size: 3, mode: 0o644 }, 'abs');
      await add({ name: 'w/..', type: 'directory', mode: 0o755 });
      await add({ name: 'w/hard', type: 'link', linkname: '../../etc/passwd', mode: 0o644 });
      await add({ name: 'w/link', type: 'symlink', linkname: '../../etc/passwd', mode: 0o777 });
      archive.finalize();
      const fake = fakeEngine(Readable.from(archive));
      const download = await downloadTar(
        downloadTarget(fake.engine),
        tempRoot,
        () => new PassThrough(),
        undefined,
        limits,
      );
      const seen: { name: string; type: string; linkname: string | null | undefined }[] = [];
      const parser = extract();
      createReadStream(download.path).pipe(parser);
      for await (const entry of parser) {
        seen.push({
          name: entry.header.name,
          type: entry.header.type ?? '',
          linkname: entry.header.linkname,
        });
        entry.resume();
      }
      await download.dispose();
      expect(seen.map((e) => e.name)).toEqual(['w/ok.txt', 'w/link']);
      expect(seen[1]).toMatchObject({ type: 'symlink', linkname: '../../etc/passwd' });
      expect(download.refusals).toHaveLength(5);
      for (const r of download.refusals) expect(r).toMatch(/unsafe name refused/);
    } finally {
      await rm(tempRoot, { recursive: true, force: true });
    }
  });
});
