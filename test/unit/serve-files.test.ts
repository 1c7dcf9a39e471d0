import { describe, expect, it } from 'vitest';
import { fileError, userParam, type FileTarget } from '../../src/adapters/serve-files.js';
import type { SessionEngine } from '../../src/app/serve/session-engine.js';

/** What a failed file command in the container means for the API, from the messages busybox and GNU tools print. */
const target = (user = ''): FileTarget => ({
  engine: {} as SessionEngine,
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
