/** What extracting a container's session archive wrote and refused (the `extractSessions` dependency of a pair). */
export interface ExtractReport {
  /** Regular files written completely. */
  readonly files: number;
  /** Bytes in those files (after the transform). */
  readonly bytes: number;
  readonly refusals: readonly string[];
  /** The extraction stopped before the end of the archive (limit, abort, archive or write failure). */
  readonly truncated: boolean;
}
