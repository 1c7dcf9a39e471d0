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
}

/** Image builds on the engine (issue 23): the serve API's `POST /v1/images`. No pulls, ever. */
export interface ImageBuildEngine {
  /** null when the engine has no such image. */
  inspectImage(ref: string): Promise<EngineImage | null>;
  /** The id of an image carrying `key=value` as a label, or null. */
  findByLabel(key: string, value: string): Promise<string | null>;
  tag(id: string, ref: string): Promise<void>;
  /**
   * Builds from a tar context; `onLog` gets the builder's output as it comes. Rejects with the builder's own error
   * message when the build fails. `signal` aborting stops the build.
   */
  build(
    context: Readable,
    options: ImageBuildOptions,
    onLog: (text: string) => void,
    signal: AbortSignal,
  ): Promise<{ readonly id: string }>;
  /** The engine network of a session's network choice ("none" or the guarded bridge, made if needed). */
  networkMode(choice: 'none' | 'bridge'): Promise<string>;
}
