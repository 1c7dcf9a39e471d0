import { describe, expect, it } from 'vitest';
import {
  ERROR_DETAIL_MAX_DEPTH,
  ExitCode,
  InternalError,
  InvalidInputError,
  RoboguideError,
  ToolError,
  errorDetail,
  errorKind,
} from '../../../src/core/errors.js';
import { EngineError } from '../../../src/app/ports/engine-error.js';
import { MountRefusedError } from '../../../src/app/mount-walk.js';
import { LogOpenError } from '../../../src/app/pair/pair-log-types.js';
import { ApiError } from '../../../src/app/serve/api-error.js';
import { LifecycleTransitionError } from '../../../src/core/pair-lifecycle-state.js';
import { TooDeepError } from '../../../src/core/terminal-proof.js';

describe('errors', () => {
  it('carries a stable code, context and exit code', () => {
    const err = new RoboguideError('E_ENGINE_UNAVAILABLE', 'no engine', {
      exitCode: ExitCode.engineUnavailable,
      context: { socket: '/var/run/docker.sock' },
    });
    expect(err.code).toBe('E_ENGINE_UNAVAILABLE');
    expect(err.exitCode).toBe(3);
    expect(err.name).toBe('RoboguideError');
    expect(err.context).toEqual({ socket: '/var/run/docker.sock' });
  });

  it('lists every issue with its path and rule, exit 2', () => {
    const err = new InvalidInputError('E_MANIFEST_INVALID', 'manifest is invalid', [
      { path: 'jobs[0].cwd', rule: 'must be an absolute path' },
      { path: 'jobs[1].ports[0]', rule: 'must be an integer 1..65535' },
    ]);
    expect(err.exitCode).toBe(2);
    expect(err.message).toContain('jobs[0].cwd: must be an absolute path');
    expect(err.message).toContain('jobs[1].ports[0]: must be an integer 1..65535');
  });

  it('names the error class without its message', () => {
    expect(errorKind(new TypeError('secret text'))).toBe('TypeError');
    expect(errorKind('x')).toBe('string');
  });

  it('one family: every error class of the tool is a ToolError with a stable code and a cause', () => {
    const cause = new Error('underneath');
    const family: ToolError[] = [
      new RoboguideError('E_STORE', 'x', { cause }),
      new InvalidInputError('E_SPEC_INVALID', 'spec', [{ path: 'a', rule: 'b' }]),
      new EngineError('engine_error', 'x', { statusCode: 500, engineMessage: 'x' }),
      new InternalError('x', { cause }),
      new MountRefusedError('cwd', 'is a symlink'),
      new LogOpenError('EACCES'),
      new ApiError(404, 'E_NOT_FOUND', 'x'),
      new LifecycleTransitionError('running', 'started'),
      new TooDeepError(),
    ];
    for (const err of family) {
      expect(err).toBeInstanceOf(ToolError);
      expect(err.code).toMatch(/^E[A-Z_]+$/);
      expect(err.name).toBe(err.constructor.name);
    }
    expect(family[0]?.cause).toBe(cause);
    expect(family[3]?.cause).toBe(cause);
    expect(new LogOpenError('EACCES').code).toBe('EACCES');
    expect(new ApiError(404, 'E_NOT_FOUND', 'x').code).toBe('E_NOT_FOUND');
    // Only the operator-facing branch is a RoboguideError: the CLI's and the API's handling of the rest is unchanged.
    expect(new MountRefusedError('cwd', 'x')).not.toBeInstanceOf(RoboguideError);
    expect(new InternalError('x')).not.toBeInstanceOf(RoboguideError);
  });

  it('details an error for a log line: kind, code, message and the cause chain', () => {
    const errno = Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
    const wrapped = new RoboguideError('E_STORE', 'cannot write result.json', { cause: errno });
    expect(errorDetail(wrapped)).toEqual({
      kind: 'RoboguideError',
      code: 'E_STORE',
      message: 'cannot write result.json',
      cause: { kind: 'Error', code: 'ENOSPC', message: 'ENOSPC: no space left on device, write' },
    });
    expect(errorDetail('plain text')).toEqual({ kind: 'string', message: 'plain text' });
  });

  it('stops a looping cause chain at its depth limit', () => {
    const a = new InternalError('a');
    const b = new InternalError('b', { cause: a });
    Object.defineProperty(a, 'cause', { value: b });
    let depth = 0;
    for (let d: unknown = errorDetail(a); d !== undefined; d = (d as { cause?: unknown }).cause) depth += 1;
    expect(depth).toBe(ERROR_DETAIL_MAX_DEPTH);
  });
});
