import { ExitCode, RoboguideError } from '../core/errors.js';
import { diagnoseSessionTails } from '../core/provider-failure.js';
import type { SessionDiagnosis } from '../core/provider-failure.js';
import type { ProviderFailure } from '../core/result.js';
import type { SessionTails } from './ports/session-tails.js';

export interface DiagnoseSessionsOptions {
  /** Throw E_USAGE (exit 2) when `dir` is not a directory, instead of reporting "no failure". */
  readonly requireDirectory?: boolean;
}

/** The diagnosis and what it rests on (`diagnose sessions --json`). */
export interface SessionsReport extends SessionDiagnosis {
  /** Session files that were candidates but could not be read or decompressed. */
  readonly files_unreadable: number;
  /** Whether this Node can decompress `.jsonl.zst` rollouts (false: each one counts as unreadable). */
  readonly zstd_available: boolean;
}

/**
 * Diagnoses a provider failure from the Codex session files under `dir` (SPEC §6), with how many
 * files and lines it read and whether any turn end was found. A hint for operators: it never
 * changes a verdict. A missing directory means "nothing found" unless `requireDirectory` is set
 * (the CLI sets it: a mistyped --dir must not look like a clean run).
 */
export async function diagnoseSessionsReport(
  tails: SessionTails,
  dir: string,
  options: DiagnoseSessionsOptions = {},
): Promise<SessionsReport> {
  const { tails: read, unreadable } = await readTails(tails, dir, options);
  return {
    ...diagnoseSessionTails(read),
    files_unreadable: unreadable,
    zstd_available: tails.zstdAvailable,
  };
}

/** The tails of the session files under `dir` (E_USAGE for a missing one when `requireDirectory`). */
async function readTails(
  tails: SessionTails,
  dir: string,
  options: DiagnoseSessionsOptions,
): Promise<Awaited<ReturnType<SessionTails['read']>>> {
  if (options.requireDirectory === true && !(await tails.isDirectory(dir))) {
    throw new RoboguideError('E_USAGE', `session directory not found: ${dir}`, {
      exitCode: ExitCode.invalidInput,
      context: { dir },
      suggestions: ['pass --dir the directory holding the Codex session files (e.g. ~/.codex/sessions)'],
    });
  }
  return tails.read(dir);
}

/** The provider failure alone (a pair's result.json carries only this). */
export async function diagnoseSessions(
  tails: SessionTails,
  dir: string,
  options: DiagnoseSessionsOptions = {},
): Promise<ProviderFailure | null> {
  // Not the report: whether zstd can be read is asked of node:zlib, which a pair's diagnosis need not load (its
  // rollouts' reader loads it for a compressed one; issue 39).
  return diagnoseSessionTails((await readTails(tails, dir, options)).tails).provider_failure;
}
