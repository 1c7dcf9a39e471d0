import type { OutcomeRead } from '../../core/outcome.js';

/**
 * The driver's outcome file (SPEC §5) as the evidence sees it: read bounded and never through a symlink, its
 * digest, and the masked evidence copy of a pair finished without its watcher. Adapter:
 * src/adapters/outcome-reader.ts.
 */
export interface OutcomeReader {
  /** What is at `path` now. Never throws: a failure is `unreadable` with its errno code. */
  read(path: string): Promise<OutcomeRead>;
  /**
   * SHA-256 (hex) of the outcome at `path` as it is now, or null when there are no bytes to hash: missing,
   * unreadable (a symlink, not a regular file, an I/O error) or over the size limit — the cases result.json records
   * as `outcome_sha256: null`. Never throws. The one digest of reconciliation, in process and in the CLI.
   */
  sha256(path: string): Promise<string | null>;
  /**
   * A pair finished without its supervisor (lost worker, `pair recover`): the private outcome as the driver left it
   * (for the verdict) and the bytes kept in the evidence after masking `secrets` (for `outcome_sha256`; null when
   * there are none).
   */
  readAndMask(
    privatePath: string,
    secrets: readonly string[],
  ): Promise<{ read: OutcomeRead; kept: Uint8Array | null; masked: boolean }>;
}
