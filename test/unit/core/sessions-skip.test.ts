import { describe, expect, it } from 'vitest';
import { ImageSessionsMemo, pathsOverlap, untouchedByContainer } from '../../../src/core/sessions-skip.js';

describe('pathsOverlap', () => {
  it('is true for the same path, one under the other, or one above the other; false for siblings and prefixes', () => {
    expect(pathsOverlap('/root/.codex/sessions', '/root/.codex/sessions/')).toBe(true);
    expect(pathsOverlap('/root/.codex/sessions/2026/a.jsonl', '/root/.codex/sessions')).toBe(true);
    expect(pathsOverlap('/root', '/root/.codex/sessions')).toBe(true);
    expect(pathsOverlap('/', '/root/.codex/sessions')).toBe(true);
    expect(pathsOverlap('/root/.codex/sessions2', '/root/.codex/sessions')).toBe(false);
    expect(pathsOverlap('/root/.codex/session', '/root/.codex/sessions')).toBe(false);
    expect(pathsOverlap('/tmp/x', '/root/.codex/sessions')).toBe(false);
    expect(pathsOverlap('/root/./.codex/../.codex/sessions/x', '/root/.codex/sessions')).toBe(true);
  });
});

describe('untouchedByContainer', () => {
  const base = {
    imageId: 'sha256:a',
    changed: ['/tmp', '/tmp/outcome.json', '/etc/passwd'],
    mounts: ['/work', '/work/out'],
  };
  it('is true only when no change and no mount is at, under or above the dir', () => {
    expect(untouchedByContainer(base, '/root/.codex/sessions')).toBe(true);
    expect(
      untouchedByContainer(
        { ...base, changed: [...base.changed, '/root/.codex/sessions/x'] },
        '/root/.codex/sessions',
      ),
    ).toBe(false);
    expect(
      untouchedByContainer({ ...base, changed: [...base.changed, '/root'] }, '/root/.codex/sessions'),
    ).toBe(false);
    expect(untouchedByContainer({ ...base, mounts: ['/root/.codex'] }, '/root/.codex/sessions')).toBe(false);
    expect(untouchedByContainer(base, '/work/sessions')).toBe(false);
    expect(untouchedByContainer(base, 'relative/sessions')).toBe(false);
    // A `..` is doubt: in the container it is taken after a link (/opt → /usr/x makes /opt/.. /usr), not lexically.
    expect(untouchedByContainer(base, '/opt/../root/.codex/sessions')).toBe(false);
    expect(untouchedByContainer({ ...base, changed: [] }, '/root/.codex/../.codex/sessions')).toBe(false);
  });
});

describe('ImageSessionsMemo', () => {
  it('remembers per image and dir, never for an unknown image id, and forgets the oldest past its capacity', () => {
    const memo = new ImageSessionsMemo(2);
    memo.learn('', '/s', 'empty');
    expect(memo.get('', '/s')).toBeUndefined();
    memo.learn('sha256:a', '/s/', 'empty');
    expect(memo.get('sha256:a', '/s')).toBe('empty');
    expect(memo.get('sha256:b', '/s')).toBeUndefined();
    expect(memo.get('sha256:a', '/t')).toBeUndefined();
    memo.learn('sha256:b', '/s', 'absent');
    memo.learn('sha256:c', '/s', 'empty');
    expect(memo.get('sha256:a', '/s')).toBeUndefined();
    expect(memo.get('sha256:b', '/s')).toBe('absent');
    expect(memo.get('sha256:c', '/s')).toBe('empty');
  });
});
