import { describe, expect, it } from 'vitest';
import {
  baseImages,
  normalizeDockerfilePath,
  normalizeTag,
  reservedTagRule,
} from '../../src/core/image-build.js';

describe('baseImages', () => {
  it('lists FROM images, without scratch, stages, or duplicates; ARG defaults substituted; COPY --from images too', () => {
    const dockerfile = [
      '# syntax comment',
      'ARG BASE=roboguide-example/my-eval:1',
      'FROM --platform=linux/amd64 ${BASE} AS build',
      'RUN echo \\',
      '  FROM not-an-instruction',
      'FROM scratch',
      'COPY --from=build /x /x',
      'COPY --from=tools/helper:2 /bin/h /bin/h',
      'from Busybox:latest as final',
      'FROM final',
    ].join('\n');
    expect(baseImages(dockerfile)).toEqual([
      'roboguide-example/my-eval:1',
      'tools/helper:2',
      'Busybox:latest',
    ]);
  });

  it('an unset ARG takes its ${X:-default}', () => {
    expect(baseImages('FROM ${IMG:-alpine:3}\n')).toEqual(['alpine:3']);
  });
});

describe('tags and paths', () => {
  it('normalizes tags (":latest" added) and refuses what is not a reference', () => {
    expect(normalizeTag('hb__task-1')).toEqual({
      repo: 'hb__task-1',
      tag: 'latest',
      ref: 'hb__task-1:latest',
    });
    expect(normalizeTag('localhost:5000/a/b:v1.2')).toEqual({
      repo: 'localhost:5000/a/b',
      tag: 'v1.2',
      ref: 'localhost:5000/a/b:v1.2',
    });
    for (const bad of ['', 'UPPER', 'a b', 'a:', 'a:-x', '../x']) expect(normalizeTag(bad)).toBeNull();
  });

  it('reserves roboguide/ tags', () => {
    expect(reservedTagRule('roboguide/pair-driver:1')).not.toBeNull();
    expect(reservedTagRule('roboguide-example/x:1')).toBeNull();
  });

  it('dockerfile paths stay inside the context', () => {
    expect(normalizeDockerfilePath('./environment/Dockerfile')).toBe('environment/Dockerfile');
    for (const bad of ['', '/Dockerfile', '../Dockerfile', 'a/../../b', '.'])
      expect(normalizeDockerfilePath(bad)).toBeNull();
  });
});
