/**
 * Where the host-wide registry lives when `--registry` is not given:
 * `$XDG_STATE_HOME/roboguide-eval/registry.db`, else `~/.local/state/roboguide-eval/registry.db`.
 * A relative or empty XDG_STATE_HOME is ignored, as the XDG base-directory spec requires.
 */
import { homedir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';
import { InvalidInputError } from '../../core/errors.js';

export const REGISTRY_DIR_NAME = 'roboguide-eval';
export const REGISTRY_FILE_NAME = 'registry.db';

export function defaultRegistryPath(
  env: Readonly<Record<string, string | undefined>> = process.env,
  homeDir: string = homedir(),
): string {
  const xdgStateHome = env.XDG_STATE_HOME;
  const stateHome =
    xdgStateHome !== undefined && isAbsolute(xdgStateHome) ? xdgStateHome : join(homeDir, '.local', 'state');
  return join(stateHome, REGISTRY_DIR_NAME, REGISTRY_FILE_NAME);
}

/** The `--registry` flag wins (resolved against the working directory); otherwise the default. */
export function resolveRegistryPath(
  flag: string | undefined,
  env: Readonly<Record<string, string | undefined>> = process.env,
  homeDir: string = homedir(),
): string {
  return flag !== undefined && flag.length > 0 ? resolve(flag) : defaultRegistryPath(env, homeDir);
}

/** Where the registry is, and whether the user named it (`--registry`) or it is the default location. */
export interface RegistryLocation {
  readonly path: string;
  readonly explicit: boolean;
}

/** `scheme://…` (postgres://, x://) or `postgres:`/`postgresql:`: a URL, never a file name. */
const URL_LIKE = /^([A-Za-z][A-Za-z0-9+.-]*:\/\/|postgres(ql)?:)/i;

/**
 * The `--registry` flag as a location. A value that looks like a URL is refused (exit 2) and never taken for
 * a relative file path; the message does not repeat it (a URL may carry a password). Writes nothing.
 */
export function registryLocation(
  flag: string | undefined,
  env: Readonly<Record<string, string | undefined>> = process.env,
  homeDir: string = homedir(),
): RegistryLocation {
  if (flag !== undefined && URL_LIKE.test(flag)) {
    throw new InvalidInputError('E_USAGE', 'invalid --registry', [
      {
        path: '--registry',
        rule: 'looks like a URL; only a SQLite database file path is supported (a PostgreSQL registry is not built yet)',
      },
    ]);
  }
  return { path: resolveRegistryPath(flag, env, homeDir), explicit: flag !== undefined && flag.length > 0 };
}
