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
  if (options.requireDirectory === true && !(await tails.isDirectory(dir))) {
    throw new RoboguideError('E_USAGE', `session directory not found: ${dir}`, {
      exitCode: ExitCode.invalidInput,
      context: { dir },
      suggestions: ['pass --dir the directory holding the Codex session files (e.g. ~/.codex/sessions)'],
    });
  }
  const files = await tails.read(dir);
  return {
    ...diagnoseSessionTails(files.tails),
    files_unreadable: files.unreadable,
    zstd_available: tails.zstdAvailable,
  };
}

/** The provider failure alone (a pair's result.json carries only this). */
export async function diagnoseSessions(
  tails: SessionTails,
  dir: string,
  options: DiagnoseSessionsOptions = {},
): Promise<ProviderFailure | null> {
  return (await diagnoseSessionsReport(tails, dir, options)).provider_failure;
}
