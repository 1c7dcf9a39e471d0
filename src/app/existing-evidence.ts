import { ExitCode, RoboguideError } from '../core/errors.js';
import type { CapacityRegistry } from './ports/capacity-registry.js';

/** Where the registry of `--registry` is, and how to open it without creating one (wired in the composition root). */
export interface ExistingRegistry {
  /** Shown to the user: the SQLite file, or the PostgreSQL URL without its password. */
  readonly path: string;
  /** A SQLite file, which must exist already (a database server is asked when opened). */
  readonly file: boolean;
  /** Refuses an existing file that is no registry (never migrates it), then opens. */
  open(): Promise<CapacityRegistry>;
  /** True when the user named it (`--registry`); false for the default or the recorded one. */
  readonly explicit?: boolean;
}

export interface ExistingEvidenceDeps {
  readonly isDirectory: (path: string) => Promise<boolean>;
  readonly exists: (path: string) => Promise<boolean>;
  /**
   * The registry of `--registry`; unset: the one the evidence recorded (`recorded`), else the default. Throws for a
   * URL other than PostgreSQL's.
   */
  readonly locateRegistry: (recorded: string | null) => ExistingRegistry;
  /** The registry the output's evidence records: batch.json `registry_path`, or a pair run's receipt; null if none. */
  readonly recordedRegistry?: (output: string) => Promise<string | null>;
}

/** What the refusals suggest, in the words of the command that asks. */
export interface ExistingEvidenceWords {
  readonly outputSuggestion?: string;
  readonly registrySuggestion: string;
}

function usage(message: string, suggestion: string | undefined): RoboguideError {
  return new RoboguideError('E_USAGE', message, {
    exitCode: ExitCode.invalidInput,
    ...(suggestion !== undefined ? { suggestions: [suggestion] } : {}),
  });
}

/**
 * `reconcile` and `pair recover` act on evidence that exists: the output directory must exist, and so must the
 * registry its pairs were admitted in (a missing SQLite file is refused, never created empty: a new registry
 * holds no reservation to release). Without --registry, the registry the evidence records is used (batch.json, or
 * a pair run's receipt); a --registry naming another one is refused, naming both. Refusals exit 2, in this order:
 * output, registry location (and its agreement with the recorded one), registry file.
 */
export async function openExistingEvidence(
  deps: ExistingEvidenceDeps,
  output: string,
  words: ExistingEvidenceWords,
): Promise<{ readonly registry: CapacityRegistry; readonly registryPath: string }> {
  if (!(await deps.isDirectory(output)))
    throw usage(`output directory ${output} does not exist`, words.outputSuggestion);
  const recorded = deps.recordedRegistry ? await deps.recordedRegistry(output) : null;
  const location = deps.locateRegistry(recorded);
  if (recorded !== null && location.explicit === true && location.path !== recorded) {
    // Another registry holds no reservation of these pairs: reconciling there would refuse every pair, or worse.
    throw usage(
      `--registry ${location.path} is not the registry the pairs of ${output} were admitted in: the evidence records ${recorded}`,
      `omit --registry (the recorded ${recorded} is used), or pass --registry ${recorded}`,
    );
  }
  if (location.file && !(await deps.exists(location.path)))
    throw usage(`no capacity registry at ${location.path}`, words.registrySuggestion);
  return { registry: await location.open(), registryPath: location.path };
}
