import type { Readable } from 'node:stream';

/** An image as the engine describes it. */
export interface EngineImage {
  readonly id: string;
  readonly labels: Readonly<Record<string, string>>;
}

export interface ImageBuildOptions {
  /** `repo:tag` to give the image. */
  readonly ref: string;
  /** The Dockerfile's path inside the context. */
  readonly dockerfile: string;
  readonly labels: Readonly<Record<string, string>>;
  /** The engine network RUN steps join ("none", or our guarded network's name). */
  readonly networkMode: string;
  /** The memory (and memory+swap) limit of each build step's container, in bytes. */
  readonly memoryBytes: number;
}

/** The server's own record of a build it made: what a cache hit is checked against (never an image's labels). */
export interface BuildRecord {
  readonly id: string;
  readonly tag: string;
}

/** Build records kept by the server (one per cache key, written after a successful build). */
export interface BuildRecords {
  read(key: string): Promise<BuildRecord | null>;
  write(key: string, record: BuildRecord): Promise<void>;
}

/** Image builds on the engine (issue 23): the serve API's `POST /v1/images`. No pulls, ever. */
export interface ImageBuildEngine {
  /** null when the engine has no such image. */
  inspectImage(ref: string): Promise<EngineImage | null>;
  tag(id: string, ref: string): Promise<void>;
  /**
   * Builds from a tar context; `onLog` gets the builder's output as it comes (when it returns a promise, the
   * builder's output is paused until it settles: backpressure). Rejects with the builder's own error message when
   * the build fails. `signal` aborting stops the build.
   */
  build(
    context: Readable,
    options: ImageBuildOptions,
    onLog: (text: string) => Promise<void> | undefined,
    signal: AbortSignal,
  ): Promise<{ readonly id: string }>;
  /** The engine network of a session's network choice ("none" or the guarded bridge, made if needed). */
  networkMode(choice: 'none' | 'bridge'): Promise<string>;
}
