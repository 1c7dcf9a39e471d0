import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import type { EngineImage, ImageBuildEngine, ImageBuildOptions } from '../../src/app/ports/image-builds.js';
import { ImageBuilds, type ImageBuildRequest } from '../../src/app/serve/image-build.js';
import {
  baseImages,
  BUILD_KEY_LABEL,
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

describe('ImageBuilds (a hand-written engine typed as the port)', () => {
  class FakeImages implements ImageBuildEngine {
    readonly images = new Map<string, EngineImage>();
    readonly tags: string[] = [];
    builds = 0;
    inspectImage(ref: string): Promise<EngineImage | null> {
      return Promise.resolve(this.images.get(ref) ?? null);
    }
    findByLabel(key: string, value: string): Promise<string | null> {
      return Promise.resolve([...this.images.values()].find((i) => i.labels[key] === value)?.id ?? null);
    }
    tag(id: string, ref: string): Promise<void> {
      this.tags.push(`${id}->${ref}`);
      return Promise.resolve();
    }
    build(
      _context: Readable,
      options: ImageBuildOptions,
      onLog: (text: string) => void,
    ): Promise<{ id: string }> {
      this.builds += 1;
      onLog('Step 1/1\n');
      this.images.set(options.ref, { id: `sha256:${this.builds}`, labels: { ...options.labels } });
      return Promise.resolve({ id: `sha256:${this.builds}` });
    }
    networkMode(choice: 'none' | 'bridge'): Promise<string> {
      return Promise.resolve(choice === 'none' ? 'none' : 'roboguide-pairs');
    }
  }
  const request = (over: Partial<ImageBuildRequest> = {}): ImageBuildRequest => ({
    ref: 'task:1',
    dockerfile: 'Dockerfile',
    dockerfileText: 'FROM base:1\n',
    key: 'k1',
    network: 'none',
    ...over,
  });

  it('refuses past --max-builds with 429 and frees the slot when a build ends', () => {
    const builds = new ImageBuilds(new FakeImages(), 1);
    const end = builds.acquire();
    expect(() => builds.acquire()).toThrow(expect.objectContaining({ status: 429 }));
    end();
    builds.acquire();
  });

  it('names every missing base image; builds, then answers the same key from the cache (tagged as asked)', async () => {
    const engine = new FakeImages();
    const builds = new ImageBuilds(engine, 2);
    await expect(
      builds.plan(request({ dockerfileText: 'FROM base:1\nFROM other:2\n' })),
    ).rejects.toMatchObject({
      status: 400,
      code: 'E_IMAGE_MISSING',
      message: expect.stringContaining('base:1, other:2'),
    });
    engine.images.set('base:1', { id: 'sha256:base', labels: {} });
    expect(await builds.plan(request())).toEqual({ kind: 'build' });
    const logs: string[] = [];
    expect(
      await builds.build(request(), Readable.from([]), (t) => logs.push(t), new AbortController().signal),
    ).toEqual({ tag: 'task:1', id: 'sha256:1', cached: false });
    expect(logs).toEqual(['Step 1/1\n']);
    expect(engine.images.get('task:1')?.labels).toEqual({ [BUILD_KEY_LABEL]: 'k1' });
    expect(await builds.plan(request({ ref: 'other-name:2' }))).toEqual({
      kind: 'cached',
      image: { tag: 'other-name:2', id: 'sha256:1', cached: true },
    });
    expect(engine.tags).toEqual(['sha256:1->other-name:2']);
    expect(engine.builds).toBe(1);
  });

  it('never moves a tag it did not build (409), nor a roboguide/ tag (400)', async () => {
    const engine = new FakeImages();
    engine.images.set('theirs:1', { id: 'sha256:theirs', labels: {} });
    const builds = new ImageBuilds(engine, 2);
    await expect(builds.plan(request({ ref: 'theirs:1' }))).rejects.toMatchObject({
      status: 409,
      code: 'E_TAG_TAKEN',
    });
    await expect(builds.plan(request({ ref: 'roboguide/pair-driver:1' }))).rejects.toMatchObject({
      status: 400,
    });
  });
});
