import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { pack } from 'tar-stream';
import { describe, expect, it } from 'vitest';
import { readBuildEvents } from '../../src/adapters/docker/docker-image-builds.js';
import { readEntry } from '../../src/adapters/http/image-routes.js';
import type {
  BuildRecord,
  BuildRecords,
  EngineImage,
  ImageBuildEngine,
  ImageBuildOptions,
} from '../../src/app/ports/image-builds.js';
import { ImageBuilds, type ImageBuildRequest } from '../../src/app/serve/image-build.js';
import {
  baseImages,
  BUILD_KEY_LABEL,
  canonicalRef,
  dockerfileRuleIssues,
  normalizeDockerfilePath,
  normalizeTag,
  reservedTagRule,
} from '../../src/core/image-build.js';

describe('dockerfileRuleIssues', () => {
  it('refuses parser directives (escape, syntax, check), naming the line', () => {
    for (const directive of ['# escape=`', '#syntax=docker/dockerfile:1', '# check=skip=all'])
      expect(dockerfileRuleIssues(`${directive}\nFROM base:1\n`)).toEqual([
        { path: 'dockerfile', rule: expect.stringMatching(/^line 1: parser directives/) },
      ]);
    // The escape bypass: with escape=` the backslash line is not a continuation, so FROM alpine is a real FROM.
    expect(dockerfileRuleIssues('# escape=`\nFROM base:1\nRUN echo \\\nFROM alpine\n')).toHaveLength(1);
    // A comment after the first instruction is a comment, not a directive.
    expect(dockerfileRuleIssues('FROM base:1\n# escape=`\n')).toEqual([]);
  });

  it('refuses ADD of a URL or git remote in every form, naming the line; a local ADD passes', () => {
    for (const line of [
      'ADD http://example.com/x /x',
      'ADD https://example.com/x.tgz /x',
      'add --checksum=sha256:abc https://example.com/x /x',
      'ADD --link git@github.com:o/r.git /r',
      'ADD git://example.com/r.git /r',
      'ADD ["https://example.com/x", "/x"]',
      'ADD --chown=1:1 a.txt ftp://h/x /x',
    ])
      expect(dockerfileRuleIssues(`FROM base:1\n${line}\n`), line).toEqual([
        { path: 'dockerfile', rule: expect.stringContaining(`${line}: ADD of a URL`) },
      ]);
    expect(dockerfileRuleIssues('FROM base:1\nADD files.tar /opt/\nCOPY a b\n')).toEqual([]);
  });

  it('refuses LABEL roboguide.* (any form, any case)', () => {
    for (const line of [
      'LABEL roboguide.build.sha256=abc',
      'LABEL a=b "roboguide.x"=y',
      'label RoboGuide.build.sha256 abc',
    ])
      expect(dockerfileRuleIssues(`FROM base:1\n${line}\n`), line).toHaveLength(1);
    expect(dockerfileRuleIssues('FROM base:1\nLABEL maintainer=me\n')).toEqual([]);
  });
});

describe('readEntry (the Dockerfile inside the tar)', () => {
  const tarOf = async (entries: [string, string][]): Promise<string> => {
    const p = pack();
    for (const [name, body] of entries) p.entry({ name }, body);
    p.finalize();
    const chunks: Buffer[] = [];
    for await (const c of p) chunks.push(c as Buffer);
    const dir = await mkdtemp(join(tmpdir(), 'rg-tar-'));
    const file = join(dir, 'ctx.tar');
    await writeFile(file, Buffer.concat(chunks));
    return file;
  };

  it('refuses a tar holding the Dockerfile twice (also as ./Dockerfile), reads a single one', async () => {
    const twice = await tarOf([
      ['Dockerfile', 'FROM base:1\n'],
      ['./Dockerfile', 'FROM alpine\n'],
    ]);
    await expect(readEntry(twice, 'Dockerfile')).rejects.toMatchObject({
      status: 400,
      issues: [{ path: 'dockerfile', rule: 'Dockerfile appears 2 times in the tar; it must appear once' }],
    });
    const once = await tarOf([
      ['./env/Dockerfile', 'FROM base:1\n'],
      ['Dockerfile', 'x'],
    ]);
    expect(await readEntry(once, 'env/Dockerfile')).toBe('FROM base:1\n');
    await rm(join(twice, '..'), { recursive: true });
    await rm(join(once, '..'), { recursive: true });
  });
});

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

  it('reserves roboguide/ tags, also behind docker.io/, index.docker.io/ or library/', () => {
    expect(reservedTagRule('roboguide/pair-driver:1')).not.toBeNull();
    for (const ref of [
      'docker.io/roboguide/x:1',
      'index.docker.io/roboguide/x:1',
      'docker.io/library/roboguide/x:1',
    ])
      expect(reservedTagRule(ref), ref).not.toBeNull();
    expect(canonicalRef('docker.io/library/task:1')).toBe('task:1');
    expect(canonicalRef('localhost:5000/task:1')).toBe('localhost:5000/task:1');
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
    readonly options: ImageBuildOptions[] = [];
    builds = 0;
    hang = false;
    inspectImage(ref: string): Promise<EngineImage | null> {
      return Promise.resolve(
        this.images.get(ref) ?? [...this.images.values()].find((i) => i.id === ref) ?? null,
      );
    }
    tag(id: string, ref: string): Promise<void> {
      this.tags.push(`${id}->${ref}`);
      return Promise.resolve();
    }
    build(
      _context: Readable,
      options: ImageBuildOptions,
      onLog: (text: string) => Promise<void> | undefined,
      signal: AbortSignal,
    ): Promise<{ id: string }> {
      this.options.push(options);
      if (this.hang)
        return new Promise((_resolve, reject) =>
          signal.addEventListener('abort', () => reject(new Error('stopped')), { once: true }),
        );
      this.builds += 1;
      void onLog('Step 1/1\n');
      this.images.set(options.ref, { id: `sha256:${this.builds}`, labels: { ...options.labels } });
      return Promise.resolve({ id: `sha256:${this.builds}` });
    }
    networkMode(choice: 'none' | 'bridge'): Promise<string> {
      return Promise.resolve(choice === 'none' ? 'none' : 'roboguide-pairs');
    }
  }
  class FakeRecords implements BuildRecords {
    readonly map = new Map<string, BuildRecord>();
    read(key: string): Promise<BuildRecord | null> {
      return Promise.resolve(this.map.get(key) ?? null);
    }
    write(key: string, record: BuildRecord): Promise<void> {
      this.map.set(key, record);
      return Promise.resolve();
    }
  }
  const K1 = 'a'.repeat(64);
  const limits = { maxConcurrent: 2, memoryBytes: 2048 * 1024 * 1024, timeoutMs: 60_000 };
  const request = (over: Partial<ImageBuildRequest> = {}): ImageBuildRequest => ({
    ref: 'task:1',
    dockerfile: 'Dockerfile',
    dockerfileText: 'FROM base:1\n',
    key: K1,
    network: 'none',
    ...over,
  });

  it('refuses past --max-builds with 429 and frees the slot when a build ends', () => {
    const builds = new ImageBuilds(new FakeImages(), new FakeRecords(), { ...limits, maxConcurrent: 1 });
    const end = builds.acquire();
    expect(() => builds.acquire()).toThrow(expect.objectContaining({ status: 429 }));
    end();
    builds.acquire();
  });

  it('names every missing base image; builds, then answers the same key from the cache (tagged as asked)', async () => {
    const engine = new FakeImages();
    const records = new FakeRecords();
    const builds = new ImageBuilds(engine, records, limits);
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
      await builds.build(
        request(),
        Readable.from([]),
        (t) => void logs.push(t),
        new AbortController().signal,
      ),
    ).toEqual({ tag: 'task:1', id: 'sha256:1', cached: false });
    expect(logs).toEqual(['Step 1/1\n']);
    expect(engine.images.get('task:1')?.labels).toEqual({ [BUILD_KEY_LABEL]: K1 });
    expect(engine.options[0]?.memoryBytes).toBe(2048 * 1024 * 1024);
    expect(records.map.get(K1)).toEqual({ id: 'sha256:1', tag: 'task:1' });
    expect(await builds.plan(request({ ref: 'other-name:2' }))).toEqual({
      kind: 'cached',
      image: { tag: 'other-name:2', id: 'sha256:1', cached: true },
    });
    expect(engine.tags).toEqual(['sha256:1->other-name:2']);
    expect(engine.builds).toBe(1);
  });

  it('never moves a tag it did not build (409), nor a roboguide/ tag (400)', async () => {
    const engine = new FakeImages();
    const records = new FakeRecords();
    engine.images.set('theirs:1', { id: 'sha256:theirs', labels: {} });
    const builds = new ImageBuilds(engine, records, limits);
    await expect(builds.plan(request({ ref: 'theirs:1' }))).rejects.toMatchObject({
      status: 409,
      code: 'E_TAG_TAKEN',
    });
    await expect(builds.plan(request({ ref: 'roboguide/pair-driver:1' }))).rejects.toMatchObject({
      status: 400,
    });
  });

  it('a label alone is no cache hit: the server record AND the engine id must match (cache poisoning)', async () => {
    const engine = new FakeImages();
    const records = new FakeRecords();
    engine.images.set('base:1', { id: 'sha256:base', labels: {} });
    // A caller's image carrying our label with the key of a build it expects others to make.
    engine.images.set('evil:1', { id: 'sha256:evil', labels: { [BUILD_KEY_LABEL]: K1 } });
    const builds = new ImageBuilds(engine, records, limits);
    expect(await builds.plan(request())).toEqual({ kind: 'build' });
    // A record whose image the engine no longer has (or has under another id) is no hit either.
    records.map.set(K1, { id: 'sha256:gone', tag: 'task:1' });
    expect(await builds.plan(request())).toEqual({ kind: 'build' });
    // Nor under its own tag: it is built again (the tag of an endpoint-made image may move), nothing retagged.
    expect(await builds.plan(request({ ref: 'evil:1' }))).toEqual({ kind: 'build' });
    expect(engine.tags).toEqual([]);
  });

  it('rebuilds under a tag that another server on the engine built (its record is in another data dir)', async () => {
    const engine = new FakeImages();
    engine.images.set('base:1', { id: 'sha256:base', labels: {} });
    engine.images.set('task:1', { id: 'sha256:other-server', labels: { [BUILD_KEY_LABEL]: K1 } });
    const builds = new ImageBuilds(engine, new FakeRecords(), limits);
    expect(await builds.plan(request({ ref: 'task:1' }))).toEqual({ kind: 'build' });
    // An operator's own image under that tag (no label) stays refused.
    engine.images.set('task:1', { id: 'sha256:operator', labels: {} });
    await expect(builds.plan(request({ ref: 'task:1' }))).rejects.toMatchObject({
      status: 409,
      code: 'E_TAG_TAKEN',
    });
  });

  it('refuses a Dockerfile breaking a rule before anything else (400 naming the line)', async () => {
    const engine = new FakeImages();
    engine.images.set('base:1', { id: 'sha256:base', labels: {} });
    const builds = new ImageBuilds(engine, new FakeRecords(), limits);
    await expect(
      builds.plan(request({ dockerfileText: 'FROM base:1\nLABEL roboguide.build.sha256=x\n' })),
    ).rejects.toMatchObject({
      status: 400,
      issues: [{ path: 'dockerfile', rule: expect.stringContaining('LABEL roboguide.build.sha256=x') }],
    });
  });

  it('stops a build past the time limit (E_BUILD_TIMEOUT) and writes no record', async () => {
    const engine = new FakeImages();
    engine.hang = true;
    const records = new FakeRecords();
    const builds = new ImageBuilds(engine, records, { ...limits, timeoutMs: 50 });
    await expect(
      builds.build(request(), Readable.from([]), () => undefined, new AbortController().signal),
    ).rejects.toMatchObject({ code: 'E_BUILD_TIMEOUT' });
    expect(records.map.size).toBe(0);
  });
});

describe('readBuildEvents (the engine build output, with backpressure)', () => {
  it('pauses the engine stream while a log write waits for a slow reader, resumes after, keeps order', async () => {
    const stream = new PassThrough();
    const seen: string[] = [];
    let release: () => void = () => undefined;
    const done = readBuildEvents(stream, new AbortController().signal, (event) => {
      seen.push(event.stream ?? `id=${event.aux?.ID ?? ''}`);
      if (event.stream === 'slow\n')
        return new Promise<void>((resolve) => {
          release = resolve;
        });
      return undefined;
    });
    stream.write(`${JSON.stringify({ stream: 'slow\n' })}\n{"stream":"par`);
    await new Promise((r) => setImmediate(r));
    expect(stream.isPaused()).toBe(true);
    stream.write(`t\\n"}\nnot json\n${JSON.stringify({ aux: { ID: 'sha256:x' } })}\n`);
    await new Promise((r) => setImmediate(r));
    expect(seen).toEqual(['slow\n']);
    release();
    await new Promise((r) => setImmediate(r));
    expect(stream.isPaused()).toBe(false);
    stream.end();
    await done;
    expect(seen).toEqual(['slow\n', 'part\n', 'id=sha256:x']);
  });
});
