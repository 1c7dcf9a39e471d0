import type { SessionTail } from '../../core/provider-failure.js';

export interface SessionFiles {
  /** Tails of the files read, oldest first (the order the reducer treats as "later is newer"). */
  readonly tails: SessionTail[];
  /** Candidate files that could not be read (I/O error, or a `.jsonl.zst` that could not be decompressed). */
  readonly unreadable: number;
  /** Whether any candidate was a `.jsonl.zst` file. */
  readonly compressedSeen: boolean;
}

/**
 * The tails of Codex session files under a directory (SPEC §6), bounded in files and bytes whatever their sizes.
 * Adapter: src/adapters/session-tails.ts.
 */
export interface SessionTails {
  read(dir: string): Promise<SessionFiles>;
  /** Whether `dir` is a directory (following a symlink, as the operator named it). */
  isDirectory(dir: string): Promise<boolean>;
  /** Whether `.jsonl.zst` rollouts can be decompressed here (false: each one counts as unreadable). */
  readonly zstdAvailable: boolean;
}
