import { PAIR_CAPABILITIES } from './pair-limits.js';

/**
 * What keeps a pair from leaving privilege on the host (docs/secrets.md "host privilege"), as `doctor` reports it:
 * our seccomp profile (always: src/core/seccomp-profile.ts), the capabilities that stay dropped, the sweep after each
 * pair, and whether the engine maps container root to an unprivileged host user. Pure: the engine's answers come in.
 */

/** Capabilities whose absence the protection relies on: setting setuid/setgid freely, file capabilities, devices. */
export const PRIVILEGE_CAPABILITIES = ['FSETID', 'SETFCAP', 'MKNOD'] as const;

/** How the engine maps container root onto the host. */
export type UserNamespace =
  /** Container root is host root. */
  | { readonly kind: 'none' }
  /** Docker's `userns-remap`: container root is host uid/gid (null when the engine did not say which). */
  | { readonly kind: 'remap'; readonly uid: number | null; readonly gid: number | null }
  /** Rootless Docker or Podman: container root is the user who runs the engine. */
  | { readonly kind: 'rootless' };

/** The engine's facts the decision reads (`docker info` SecurityOptions and DockerRootDir). */
export interface UserNamespaceFacts {
  readonly securityOptions?: readonly string[] | undefined;
  readonly dataRoot?: string | undefined;
}

/** Each option's `name=` value (`name=seccomp,profile=default` → `seccomp`). */
function optionNames(options: readonly string[]): string[] {
  return options.flatMap((o) =>
    o
      .split(',')
      .filter((kv) => kv.startsWith('name='))
      .map((kv) => kv.slice('name='.length)),
  );
}

/**
 * Docker lists `name=userns` under SecurityOptions when the daemon runs with `userns-remap`, and then keeps its data
 * under `<data root>/<uid>.<gid>`, the remapped root's ids (seen on engine 20.10 with `--userns-remap=default`:
 * `/…/100000.100000`). `name=rootless`: a rootless engine (Docker or Podman).
 */
export function userNamespaceOf(facts: UserNamespaceFacts): UserNamespace {
  const names = optionNames(facts.securityOptions ?? []);
  if (names.includes('rootless')) return { kind: 'rootless' };
  if (!names.includes('userns')) return { kind: 'none' };
  const ids = /\/(\d+)\.(\d+)\/?$/.exec(facts.dataRoot ?? '');
  return ids === null
    ? { kind: 'remap', uid: null, gid: null }
    : { kind: 'remap', uid: Number(ids[1]), gid: Number(ids[2]) };
}

export interface HostPrivilegeProtections {
  readonly seccomp: 'roboguide';
  /** The privilege capabilities no pair or session keeps (all three unless the kept set changed). */
  readonly capabilitiesDropped: readonly string[];
  readonly userNamespace: UserNamespace;
  readonly sweep: true;
}

export function hostPrivilegeProtections(facts: UserNamespaceFacts): HostPrivilegeProtections {
  return {
    seccomp: 'roboguide',
    capabilitiesDropped: PRIVILEGE_CAPABILITIES.filter(
      (c) => !(PAIR_CAPABILITIES as readonly string[]).includes(c),
    ),
    userNamespace: userNamespaceOf(facts),
    sweep: true,
  };
}
