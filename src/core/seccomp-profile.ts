import { ALLOWED_SYSCALLS } from './seccomp-syscalls.js';

/**
 * Our seccomp profile (docs/spec.md 5.1 "hardening", docs/secrets.md "host privilege"): every pair's and every
 * session's container gets it in place of the engine's default. A pair's cwd and outcome folder are host folders
 * written by container root, which is host root unless the engine remaps users, and a file is run later through the
 * host's own mount, where `nosuid` inside the container does not apply. So no mode with S_ISUID or S_ISGID may be
 * set by any call that sets a mode, and the calls whose mode seccomp cannot see are refused.
 *
 * An allowlist: a syscall not named here gets EPERM, including the ones the engine's libseccomp does not know by name
 * (fchmodat2 on an older libseccomp) and any added to the kernel later. Pure data, built once; the engine's JSON
 * format (moby and containers/common read the same fields). Not a copy of the engine's default: written for what a
 * pair needs (files, processes, threads, sockets, time, IPC) and tested on the real engine
 * (test/integration/host-privilege.int.test.ts).
 */

/** S_ISUID | S_ISGID: the bits a mode argument may never carry. */
export const PRIVILEGE_MODE_BITS = 0o6000;

/**
 * CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET: no namespace of its own. In a user namespace of its
 * own container root holds every capability again (CAP_SETFCAP included); since Linux 5.12 mapping uid 0 there needs
 * CAP_SETFCAP outside (dropped), so no file capability valid on the host can be written: refused here all the same,
 * for older kernels and for the kernel surface a user namespace opens.
 */
export const NAMESPACE_CLONE_FLAGS = 0x7e02_0000;

const ENOSYS = 38;

interface ArgCondition {
  readonly index: number;
  readonly value: number;
  readonly valueTwo: number;
  readonly op: 'SCMP_CMP_MASKED_EQ';
}

export interface SeccompRule {
  readonly names: readonly string[];
  readonly action: 'SCMP_ACT_ALLOW' | 'SCMP_ACT_ERRNO';
  readonly errnoRet?: number;
  readonly args?: readonly ArgCondition[];
}

export interface SeccompProfile {
  readonly defaultAction: 'SCMP_ACT_ERRNO';
  readonly archMap: readonly {
    readonly architecture: string;
    readonly subArchitectures: readonly string[];
  }[];
  readonly syscalls: readonly SeccompRule[];
}

/** Each call that takes a mode, with the index of its mode argument: allowed only when (mode & 0o6000) == 0. */
export const MODE_ARGUMENT: Readonly<Record<string, number>> = {
  chmod: 1,
  fchmod: 1,
  fchmodat: 2,
  open: 2,
  openat: 3,
  creat: 1,
  mknod: 1,
  mknodat: 2,
};

/**
 * Refused with ENOSYS, so libc falls back to a call we can filter: openat2 and fchmodat2 (their mode is behind a
 * pointer or new), clone3 (its flags are behind a pointer: threads fall back to clone).
 */
export const FALLBACK_SYSCALLS = ['openat2', 'fchmodat2', 'clone3'] as const;

function maskedZero(index: number, mask: number): ArgCondition {
  return { index, value: mask, valueTwo: 0, op: 'SCMP_CMP_MASKED_EQ' };
}

function buildProfile(): SeccompProfile {
  const modeRules: SeccompRule[] = Object.entries(MODE_ARGUMENT).map(([name, index]) => ({
    names: [name],
    action: 'SCMP_ACT_ALLOW',
    args: [maskedZero(index, PRIVILEGE_MODE_BITS)],
  }));
  return {
    defaultAction: 'SCMP_ACT_ERRNO',
    archMap: [
      { architecture: 'SCMP_ARCH_X86_64', subArchitectures: ['SCMP_ARCH_X86', 'SCMP_ARCH_X32'] },
      { architecture: 'SCMP_ARCH_AARCH64', subArchitectures: ['SCMP_ARCH_ARM'] },
    ],
    syscalls: [
      { names: ALLOWED_SYSCALLS, action: 'SCMP_ACT_ALLOW' },
      ...modeRules,
      // clone's flags are its first argument on x86-64 and arm64 (not on s390, which has no entry in archMap).
      { names: ['clone', 'unshare'], action: 'SCMP_ACT_ALLOW', args: [maskedZero(0, NAMESPACE_CLONE_FLAGS)] },
      { names: FALLBACK_SYSCALLS, action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS },
    ],
  };
}

export const SECCOMP_PROFILE: SeccompProfile = buildProfile();

/** The `SecurityOpt` entry that gives a container our profile (the engine takes the JSON itself, not a path). */
export const SECCOMP_SECURITY_OPT = `seccomp=${JSON.stringify(SECCOMP_PROFILE)}`;
