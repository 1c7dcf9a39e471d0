import { isDirectory, readSessionTails } from '../adapters/session-tails.js';
import { ExitCode, RoboguideError } from '../core/errors.js';
import { reduceSessionTails } from '../core/provider-failure.js';
import type { ProviderFailure } from '../core/result.js';

export interface DiagnoseSessionsOptions {
  /** Throw E_USAGE (exit 2) when `dir` is not a directory, instead of reporting "no failure". */
  readonly requireDirectory?: boolean;
}

/**
 * Diagnoses a provider failure from the Codex session files under `dir` (SPEC §6). A hint for
 * operators: it never changes a verdict. A missing directory means "no failure found" unless
 * `requireDirectory` is set (the CLI sets it: a mistyped --dir must not look like a clean run).
 */
export async function diagnoseSessions(
  dir: string,
  options: DiagnoseSessionsOptions = {},
): Promise<ProviderFailure | null> {
  if (options.requireDirectory === true && !(await isDirectory(dir))) {
    throw new RoboguideError('E_USAGE', `session directory not found: ${dir}`, {
      exitCode: ExitCode.invalidInput,
      context: { dir },
      suggestions: ['pass --dir the directory holding the Codex session files (e.g. ~/.codex/sessions)'],
    });
  }
  return reduceSessionTails(await readSessionTails(dir));
}
