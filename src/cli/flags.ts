import { realpath, stat } from 'node:fs/promises';
import { homedir } from 'node:os';
import { resolve } from 'node:path';
import * as Flags from '@oclif/core/flags';
import { DEFAULT_BIND_ADDRESS } from '../core/bind-address.js';
import { InvalidInputError } from '../core/errors.js';
import { DEFAULT_MOUNT_ROOTS, defaultMountRoots, normalizeAbsolute } from '../core/mount-policy.js';

/**
 * Flags that several commands share word for word (help text included). A flag whose description differs between
 * commands stays in its command: `--help` is part of the interface.
 */

/** `--output` of the commands that act on an existing batch (stop, status, report, resume, node-down). */
export const batchOutputFlag = Flags.string({ description: 'batch output directory', required: true });

/** `--registry` of the commands that admit pairs (`e1-batch start`, `pair run`). */
export const admissionRegistryFlag = Flags.string({
  description:
    'host capacity registry: an existing registry, or a new file in an existing folder (default $XDG_STATE_HOME/roboguide-eval/registry.db, created on first use)',
});

/**
 * `--bind-address` of `pair run`, `e1-batch start` and `serve`: where published ports bind (docs/spec.md: an IP
 * address this host has, or the unspecified address).
 */
export const bindAddressFlag = Flags.string({
  description: 'host IP address that published ports bind to (one this host has, or 0.0.0.0)',
  default: DEFAULT_BIND_ADDRESS,
});

/** `--allow-short-secrets` of `e1-batch start` and `pair run`. */
export const allowShortSecretsFlag = Flags.boolean({
  description:
    'accept ${NAME} values shorter than 8 characters (refused otherwise); every occurrence is masked in all output, with a warning',
  default: false,
});

/**
 * The `--executor`, `--manager` and `--node-engine` flags, the same on `e1-batch start`, `pair run` and `serve`. oclif
 * checks `--executor`'s two values; the rules that hang on its value (`--manager` and `--node-engine` required with
 * swarm, refused with local) are `executorFromFlags`'s (src/core/executor.ts), which the library API shares: oclif's
 * relations cannot tell a value given from the default (`--executor local` is the default's value).
 */
export const executorFlags = {
  executor: Flags.string({
    description: "where pairs run: local (this host's engine) or swarm (Docker Swarm through --manager)",
    options: ['local', 'swarm'],
    default: 'local',
  }),
  manager: Flags.string({
    description:
      "with --executor swarm: the swarm manager's engine (unix:///path, tcp://host:port[?ca=&cert=&key=], ssh://user@host)",
  }),
  'node-engine': Flags.string({
    description:
      'with --executor swarm, repeatable: NODE=URL, the engine of swarm node NODE (hostname or id); outcome and sessions are read back and removals verified through it',
    multiple: true,
  }),
};

/**
 * `--preview` and `--execute` of the commands that change state only when told (`reconcile`, `capacity release`):
 * exactly one of the two; each command says in its own words what its two modes do.
 */
export function previewExecuteFlags(help: { readonly preview: string; readonly execute: string }) {
  return {
    preview: Flags.boolean({ description: help.preview, exactlyOne: ['preview', 'execute'] }),
    execute: Flags.boolean({ description: help.execute, exactlyOne: ['preview', 'execute'] }),
  };
}

/** `--mount-root` of `e1-batch start`, `pair run`, `serve` and `doctor`. */
export const mountRootFlag = Flags.string({
  description: `repeatable: a folder pair cwds and session mounts may also lie under (compared by real path; checked at start and again at each launch, recorded in batch.json). Host mounts are an allowlist: by default only under your home folder (its non-hidden subfolders), ${DEFAULT_MOUNT_ROOTS.join(', ')}; --mount-root adds to those, --mount-root-only replaces them`,
  multiple: true,
});

/** `--mount-root-only` beside `--mount-root`: the given roots replace the default ones instead of adding to them. */
export const mountRootOnlyFlag = Flags.boolean({
  description:
    'with --mount-root: allow mounts under the given --mount-root folders only (the default roots no longer apply)',
  dependsOn: ['mount-root'],
});

/** Both flags, for the commands' flag tables. */
export const mountRootFlags = { 'mount-root': mountRootFlag, 'mount-root-only': mountRootOnlyFlag };

/**
 * The allowlist every pair cwd and session mount must lie under, as real paths: the default roots (the home folder,
 * DEFAULT_MOUNT_ROOTS; a missing one kept as named) followed by the `--mount-root` folders, or those folders alone
 * with `--mount-root-only`. Each `--mount-root` must exist and be a folder, and must not be `/` (it would allow
 * everything). Exit 2 naming the flag otherwise; nothing is written before.
 */
export async function mountRootsFrom(
  values: readonly string[] | undefined,
  only = false,
  homeDir: string = homedir(),
): Promise<string[]> {
  const roots: string[] = [];
  for (const [i, value] of (values ?? []).entries()) {
    const path = `--mount-root[${i}]`;
    const real = await realpath(resolve(value)).catch(() => null);
    if (real === null || !(await stat(real)).isDirectory())
      throw new InvalidInputError('E_USAGE', 'invalid flags', [
        { path, rule: `${value} must be an existing folder` },
      ]);
    if (real === '/')
      throw new InvalidInputError('E_USAGE', 'invalid flags', [
        { path, rule: 'must not be / (it would allow every folder)' },
      ]);
    roots.push(real);
  }
  if (only) {
    if (roots.length === 0)
      throw new InvalidInputError('E_USAGE', 'invalid flags', [
        { path: '--mount-root-only', rule: 'needs at least one --mount-root (it would allow no folder)' },
      ]);
    return roots;
  }
  const defaults = await Promise.all(
    defaultMountRoots(homeDir).map((r) => realpath(r).catch(() => normalizeAbsolute(r))),
  );
  return [...new Set([...defaults, ...roots])];
}
