import { describe, expect, it } from 'vitest';
import { strictQuery } from '../../src/adapters/http/http-kit.js';
import { ApiError } from '../../src/app/serve/api-error.js';

/**
 * A hostile client's review found `?path=%ZZ` read as the literal `/%ZZ` and `?path=/tmp/a%C3%28b` write a file whose
 * name holds U+FFFD: URLSearchParams never refuses. Each must be a 400 naming the parameter.
 */
describe('strictQuery', () => {
  it('refuses bad percent-encoding in a value or a name with a 400 naming the parameter', () => {
    for (const [search, name] of [
      ['?path=%ZZ', 'path'],
      ['?path=/tmp/a%C3%28b', 'path'],
      ['?mode=1&path=%E0%A4', 'path'],
      ['?pa%GGth=/x', 'pa%GGth'],
    ] as const) {
      let caught: unknown;
      try {
        strictQuery(search);
      } catch (err) {
        caught = err;
      }
      expect(caught, search).toBeInstanceOf(ApiError);
      const err = caught as ApiError;
      expect(err.status).toBe(400);
      expect(JSON.stringify(err.issues)).toContain(`"path":"${name}"`);
    }
  });

  it('reads what URLSearchParams reads when every part is well formed', () => {
    const q = strictQuery('?path=%2Ftmp%2Fa%20b&mode=0644&stream=1&user=a+b&flag');
    expect(q.get('path')).toBe('/tmp/a b');
    expect(q.get('mode')).toBe('0644');
    expect(q.get('user')).toBe('a b');
    expect(q.has('flag')).toBe(true);
    expect(strictQuery('').toString()).toBe('');
  });
});
