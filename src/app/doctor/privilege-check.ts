import {
  hostPrivilegeProtections,
  PRIVILEGE_CAPABILITIES,
  type UserNamespace,
} from '../../core/host-privilege.js';
import type { EngineInfo } from '../ports/container-runtime.js';
import { fail, ok, type DoctorCheck } from './check.js';

/** What the user namespace line says. */
function describeUserNamespace(ns: UserNamespace): string {
  switch (ns.kind) {
    case 'none':
      return 'user namespace: none (container root is host root; Docker `userns-remap` would map it to an unprivileged uid)';
    case 'rootless':
      return 'user namespace: rootless engine (container root is the user who runs the engine)';
    case 'remap':
      return ns.uid === null
        ? 'user namespace: remapped (userns-remap; the engine did not say to which uid)'
        : `user namespace: remapped, container root is host uid ${ns.uid} (gid ${ns.gid}): a pair's outcome folder is opened to that group, its cwd must be writable by it (chgrp ${ns.gid}, g+w)`;
  }
}

/**
 * `host privilege` (docs/secrets.md): which protections keep a pair from leaving a setuid file, a file capability or
 * a device node on the host. Our seccomp profile and the sweep are always on; the capabilities are checked against the
 * kept set; the user namespace is read from the engine's SecurityOptions.
 */
export function hostPrivilegeCheck(info: Pick<EngineInfo, 'securityOptions' | 'dataRoot'>): DoctorCheck {
  const p = hostPrivilegeProtections(info);
  const kept = PRIVILEGE_CAPABILITIES.filter((c) => !p.capabilitiesDropped.includes(c));
  const detail = [
    'seccomp: ours (no setuid/setgid mode, no user namespace, no io_uring, openat2/fchmodat2 refused)',
    kept.length > 0
      ? `kept: CAP_${kept.join(', CAP_')}`
      : `CAP_${PRIVILEGE_CAPABILITIES.join(', CAP_')} dropped`,
    "setuid/setgid bits cleared under each pair's folders after it ran",
    describeUserNamespace(p.userNamespace),
  ].join('; ');
  const facts = {
    seccomp: p.seccomp,
    capabilities_dropped: [...p.capabilitiesDropped],
    user_namespace: p.userNamespace,
    sweep: p.sweep,
  };
  const check =
    kept.length > 0
      ? fail('host privilege', detail, `drop ${kept.map((c) => `CAP_${c}`).join(', ')} from the kept set`)
      : ok('host privilege', detail);
  return { ...check, facts };
}
