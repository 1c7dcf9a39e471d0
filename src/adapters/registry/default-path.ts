/**
 * Where the host-wide registry lives when `--registry` is not given:
 * `$XDG_STATE_HOME/roboguide-eval/registry.db`, else `~/.local/state/roboguide-eval/registry.db`.
 * A relative or empty XDG_STATE_HOME is ignored, as the XDG base-directory spec requires.
 */
import { homedir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';

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
