import type { Readable } from 'node:stream';
import {
  baseImages,
  BUILD_KEY_LABEL,
  dockerfileRuleIssues,
  reservedTagRule,
} from '../../core/image-build.js';
import type { BuildRecords, ImageBuildEngine } from '../ports/image-builds.js';
import { ApiError } from './api-error.js';

/**
 * `POST /v1/images` (issue 23): a build from a caller's tar context, cached by the context's content hash (a label on
 * the image), never pulling (a base the engine lacks is refused by name before anything is built), bounded by a
 * number of builds at once (429 past it).
 */

export interface ImageBuildRequest {
  /** `repo:tag`, normalized. */
  readonly ref: string;
  readonly dockerfile: string;
  readonly dockerfileText: string;
  /** sha256 of the Dockerfile path and the context bytes. */
  readonly key: string;
  readonly network: 'none' | 'bridge';
}

export interface BuiltImage {
  readonly tag: string;
  readonly id: string;
  readonly cached: boolean;
}

export type BuildPlan = { readonly kind: 'cached'; readonly image: BuiltImage } | { readonly kind: 'build' };

export interface ImageBuildLimits {
  /** Image builds at once (`--max-builds`; more: 429). */
  readonly maxConcurrent: number;
  /** Memory (and memory+swap) of each build step (`--build-memory-mib`). */
  readonly memoryBytes: number;
  /** A build running longer is stopped (`--build-timeout-sec`). */
  readonly timeoutMs: number;
}

export class ImageBuilds {
  readonly #engine: ImageBuildEngine;
  readonly #records: BuildRecords;
  readonly #limits: ImageBuildLimits;
  #active = 0;

  constructor(engine: ImageBuildEngine, records: BuildRecords, limits: ImageBuildLimits) {
    this.#engine = engine;
    this.#records = records;
    this.#limits = limits;
  }

  get #maxConcurrent(): number {
    return this.#limits.maxConcurrent;
  }

  /**
   * Whether the tag of the image `existing` may be moved by a build: when the image was made through this endpoint,
   * by this server or another one on the same engine (its records live in another data dir): it carries the cache
   * label, which only the endpoint sets (`LABEL roboguide.*` is refused in a Dockerfile). An operator's own image
   * (no label) is never retagged. A cache hit needs more: this server's record (see plan).
   */
  #builtByEndpoint(existing: { id: string; labels: Readonly<Record<string, string>> }): boolean {
    const key = existing.labels[BUILD_KEY_LABEL];
    return key !== undefined && /^[0-9a-f]{64}$/.test(key);
  }

  /** One more build, within the limit (429 past it); returns the function that ends it. */
  acquire(): () => void {
    if (this.#active >= this.#maxConcurrent) {
      throw new ApiError(
        429,
        'E_TOO_MANY_REQUESTS',
        `the server already has ${this.#active} image builds running (limit ${this.#maxConcurrent}, --max-builds); retry when one ends`,
        [],
        { retryAfterSec: 1 },
      );
    }
    this.#active += 1;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.#active -= 1;
    };
  }

  /**
   * Before a build: the tag must not name an image this endpoint did not build (409), a build of the same bytes is
   * answered from the cache (tagged as asked), and every base image must be on the engine (400 naming it).
   */
  async plan(request: ImageBuildRequest): Promise<BuildPlan> {
    const reserved = reservedTagRule(request.ref);
    if (reserved !== null) throw ApiError.invalid('the build request', [{ path: 'tag', rule: reserved }]);
    const refused = dockerfileRuleIssues(request.dockerfileText);
    if (refused.length > 0) throw ApiError.invalid('the Dockerfile', refused);
    const existing = await this.#engine.inspectImage(request.ref);
    if (existing !== null && !this.#builtByEndpoint(existing)) {
      throw new ApiError(
        409,
        'E_TAG_TAKEN',
        `${request.ref} names an image that was not built through POST /v1/images; choose another tag`,
        [{ path: 'tag', rule: 'names an existing image not built through POST /v1/images' }],
      );
    }
    // A hit needs the server's own record AND the engine's image under that id (a label alone proves nothing).
    const record = await this.#records.read(request.key);
    const recorded = record === null ? null : await this.#engine.inspectImage(record.id);
    const cachedId = recorded !== null && recorded.id === record?.id ? recorded.id : null;
    if (cachedId !== null) {
      if (existing?.id !== cachedId) await this.#engine.tag(cachedId, request.ref);
      return { kind: 'cached', image: { tag: request.ref, id: cachedId, cached: true } };
    }
    const missing: string[] = [];
    for (const base of baseImages(request.dockerfileText)) {
      if ((await this.#engine.inspectImage(base)) === null) missing.push(base);
    }
    if (missing.length > 0) {
      throw new ApiError(
        400,
        'E_IMAGE_MISSING',
        `the Dockerfile builds FROM ${missing.join(', ')}, not present on this engine (no pulls: load or build it first)`,
        missing.map((image) => ({
          path: 'dockerfile',
          rule: `FROM ${image}: not present on the engine (no pulls)`,
        })),
      );
    }
    return { kind: 'build' };
  }

  async build(
    request: ImageBuildRequest,
    context: Readable,
    onLog: (text: string) => Promise<void> | undefined,
    signal: AbortSignal,
  ): Promise<BuiltImage> {
    const networkMode = await this.#engine.networkMode(request.network);
    const timeoutSec = Math.round(this.#limits.timeoutMs / 1000);
    const timeout = AbortSignal.timeout(this.#limits.timeoutMs);
    let id: string;
    try {
      ({ id } = await this.#engine.build(
        context,
        {
          ref: request.ref,
          dockerfile: request.dockerfile,
          labels: { [BUILD_KEY_LABEL]: request.key },
          networkMode,
          memoryBytes: this.#limits.memoryBytes,
        },
        onLog,
        AbortSignal.any([signal, timeout]),
      ));
    } catch (err) {
      if (timeout.aborted && !signal.aborted)
        throw new ApiError(
          409,
          'E_BUILD_TIMEOUT',
          `the build ran past ${timeoutSec} s (--build-timeout-sec) and was stopped`,
          [{ path: 'body', rule: `the build must end within ${timeoutSec} s` }],
          { cause: err },
        );
      throw err;
    }
    await this.#records.write(request.key, { id, tag: request.ref });
    return { tag: request.ref, id, cached: false };
  }
}
