import { describe, expect, it } from 'vitest';
import { ExitCode, InvalidInputError, RoboguideError, errorKind } from '../../src/core/errors.js';

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
});
