/**
 * What the engine does with images for a batch's image plan (issue 43): resolve a reference in its registry, pull,
 * measure and remove. Credentials reach the engine only as the `X-Registry-Auth` header of these calls; nothing here
 * writes them anywhere.
 */

/** One registry's credentials, in memory only (from `${NAME}` references or the engine's config file). */
export interface RegistryAuth {
  readonly username?: string;
  readonly password?: string;
  readonly identitytoken?: string;
  readonly serveraddress: string;
}

/** One line of a pull's progress, as the engine streams it (no credentials in it). */
export interface PullProgress {
  readonly status?: string;
  readonly id?: string;
  readonly progressDetail?: { readonly current?: number; readonly total?: number };
}

export interface ImagePulls {
  /** The manifest digest a reference names in its registry now (`GET /distribution/{name}/json`). */
  distribution(ref: string, auth: RegistryAuth | undefined): Promise<{ readonly digest: string }>;
  /** Pull `ref`; rejects with the registry's message when the engine reports an error (in the stream or the status). */
  pull(
    ref: string,
    auth: RegistryAuth | undefined,
    onProgress?: (p: PullProgress) => void,
    signal?: AbortSignal,
  ): Promise<void>;
  /** The image's id and its size in the store, or null when the engine does not have it. */
  facts(ref: string): Promise<{ readonly id: string; readonly bytes: number } | null>;
  /** Remove without force: `in_use` when a container still uses it (the engine's 409). */
  remove(ref: string): Promise<'removed' | 'absent' | 'in_use'>;
}
