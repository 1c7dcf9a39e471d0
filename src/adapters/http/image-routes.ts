import { createHash, randomUUID } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { extract } from 'tar-stream';
import { canonicalRef, normalizeDockerfilePath, normalizeTag } from '../../core/image-build.js';
import { ApiError, toApiError } from '../../app/serve/api-error.js';
import type { ImageBuilds } from '../../app/serve/image-build.js';
import type { Logger } from '../../app/ports/logger.js';
import type { RouteContext, Router } from './http-kit.js';

export interface ImageRouteDeps {
  /** null when builds are off (`serve` without `--allow-builds`): every POST is refused with 403. */
  readonly builds: ImageBuilds | null;
  readonly tempRoot: string;
  /** The largest build context accepted (413 past it). */
  readonly maxContextBytes: number;
  readonly logger: Logger;
}

/** A Dockerfile bigger than this is not read (a real one is a few KiB). */
const MAX_DOCKERFILE_BYTES = 1024 * 1024;

/**
 * The request body into `path`, refused (413) past `cap` bytes; returns the sha256 of `prefix` and the bytes. The
 * request is never destroyed here (a destroyed request left the server unable to close at shutdown): past the cap
 * the rest is discarded and the answer closes the connection.
 */
async function spool(
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  cap: number,
  prefix: string,
): Promise<string> {
  const hash = createHash('sha256').update(prefix).update('\0');
  const out = createWriteStream(path, { mode: 0o600 });
  let total = 0;
  const outcome = await new Promise<'ok' | 'too_large' | 'broken'>((resolve) => {
    const onData = (chunk: Buffer): void => {
      total += chunk.length;
      if (total > cap) {
        req.off('data', onData);
        req.resume();
        resolve('too_large');
        return;
      }
      hash.update(chunk);
      if (!out.write(chunk)) {
        req.pause();
        out.once('drain', () => req.resume());
      }
    };
    req.on('data', onData);
    req.once('end', () => resolve('ok'));
    req.once('aborted', () => resolve('broken'));
    req.once('error', () => resolve('broken'));
    out.once('error', () => resolve('broken'));
  });
  await new Promise<void>((resolve) => out.end(() => resolve()));
  if (outcome === 'too_large') {
    res.setHeader('connection', 'close');
    throw new ApiError(
      413,
      'E_TOO_LARGE',
      `the build context is larger than ${cap} bytes (--max-build-context-mib)`,
      [{ path: 'body', rule: `must be at most ${cap} bytes` }],
    );
  }
  if (outcome === 'broken')
    throw ApiError.invalid('the build context', [
      { path: 'body', rule: 'ended early or could not be stored' },
    ]);
  if (total === 0)
    throw ApiError.invalid('the build context', [
      { path: 'body', rule: 'must be a tar of the build context (application/x-tar), not empty' },
    ]);
  return hash.digest('hex');
}

/**
 * The text of `name` in the tar at `path` (names compared normalized: no "./", no empty parts), or null when absent.
 * A tar holding `name` more than once is refused (the engine reads the last one, a check of the first would be moot).
 */
export async function readEntry(path: string, name: string): Promise<string | null> {
  const parser = extract();
  let found: string | null = null;
  let seen = 0;
  let broken = false;
  parser.on('entry', (header, stream, next) => {
    const entryName = normalizeDockerfilePath(header.name.replace(/\/+$/, '')) ?? header.name;
    if (entryName === name) seen += 1;
    if (
      found === null &&
      seen === 1 &&
      entryName === name &&
      header.type === 'file' &&
      (header.size ?? 0) <= MAX_DOCKERFILE_BYTES
    ) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: unknown) => chunks.push(c as Buffer));
      stream.on('end', () => {
        found = Buffer.concat(chunks).toString('utf8');
        next();
      });
    } else {
      stream.on('end', () => next());
      stream.resume();
    }
  });
  try {
    await pipeline(createReadStream(path), parser);
  } catch {
    broken = true;
  }
  if (broken)
    throw ApiError.invalid('the build context', [{ path: 'body', rule: 'is not a valid tar archive' }]);
  if (seen > 1)
    throw ApiError.invalid('the build context', [
      { path: 'dockerfile', rule: `${name} appears ${seen} times in the tar; it must appear once` },
    ]);
  return found;
}

/**
 * POST /v1/images?tag=NAME[:TAG]&dockerfile=PATH[&network=none|bridge]: body = a tar of the build context. Refusals
 * before the build are plain JSON errors (400, 409, 413, 429); then an NDJSON stream of `{"log"}` lines ending with
 * `{"image":{tag,id,cached}}` or `{"error":{code,message,issues}}`.
 */
async function buildImage(
  deps: ImageRouteDeps,
  { req, res, query, clientGone }: RouteContext,
): Promise<void> {
  const builds = deps.builds;
  if (builds === null)
    throw new ApiError(
      403,
      'E_BUILDS_DISABLED',
      "image builds are off on this server (start serve with --allow-builds; a build step runs as root with the engine's default capabilities)",
      [{ path: 'POST /v1/images', rule: 'needs serve --allow-builds' }],
    );
  const dockerfile = normalizeDockerfilePath(query.get('dockerfile') ?? 'Dockerfile');
  if (dockerfile === null)
    throw ApiError.invalid('the build request', [
      { path: 'dockerfile', rule: 'must be a relative path inside the context (no "..", not absolute)' },
    ]);
  const network = query.get('network') ?? 'none';
  if (network !== 'none' && network !== 'bridge')
    throw ApiError.invalid('the build request', [{ path: 'network', rule: 'must be "none" or "bridge"' }]);
  const tagParam = query.get('tag');
  const end = builds.acquire();
  const file = join(deps.tempRoot, `build-${randomUUID()}.tar`);
  try {
    const key = await spool(req, res, file, deps.maxContextBytes, dockerfile);
    const tag = normalizeTag(tagParam ?? `roboguide-build:${key.slice(0, 16)}`);
    if (tag === null)
      throw ApiError.invalid('the build request', [
        { path: 'tag', rule: 'must be an image reference NAME[:TAG] (lower-case name)' },
      ]);
    const dockerfileText = await readEntry(file, dockerfile);
    if (dockerfileText === null)
      throw ApiError.invalid('the build context', [
        {
          path: 'dockerfile',
          rule: `${dockerfile} is not a file in the context (at most ${MAX_DOCKERFILE_BYTES} bytes)`,
        },
      ]);
    const request = { ref: canonicalRef(tag.ref), dockerfile, dockerfileText, key, network } as const;
    const plan = await builds.plan(request);
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    const write = (event: unknown): void => void res.write(`${JSON.stringify(event)}\n`);
    if (plan.kind === 'cached') {
      write({ image: plan.image });
      res.end();
      return;
    }
    try {
      const image = await builds.build(
        request,
        createReadStream(file),
        (text) => {
          // Backpressure: a slow reader pauses the engine's build stream until the answer drains.
          if (!res.write(`${JSON.stringify({ log: text })}\n`)) return waitDrain(res, clientGone);
          return undefined;
        },
        clientGone,
      );
      write({ image });
      deps.logger.info({ tag: image.tag, id: image.id }, 'image built');
    } catch (err) {
      const api = toApiError(err);
      const message = api.status === 500 ? `the build failed: ${(err as Error).message}` : api.message;
      write({
        error: { code: api.status === 500 ? 'E_BUILD_FAILED' : api.code, message, issues: api.issues },
      });
    }
    res.end();
  } finally {
    end();
    await rm(file, { force: true });
  }
}

/** Resolves when `res` drains (or the client goes away). */
function waitDrain(res: ServerResponse, gone: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      res.off('close', done);
      gone.removeEventListener('abort', done);
      resolve();
    };
    res.once('drain', done);
    res.once('close', done);
    gone.addEventListener('abort', done, { once: true });
  });
}

export function registerImageRoutes(router: Router, deps: ImageRouteDeps): void {
  router.add('POST', '/v1/images', (ctx) => buildImage(deps, ctx));
}
