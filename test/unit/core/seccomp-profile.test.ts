import { describe, expect, it } from 'vitest';
import {
  FALLBACK_SYSCALLS,
  MODE_ARGUMENT,
  NAMESPACE_CLONE_FLAGS,
  PRIVILEGE_MODE_BITS,
  SECCOMP_PROFILE,
  SECCOMP_SECURITY_OPT,
  type SeccompRule,
} from '../../../src/core/seccomp-profile.js';
import { ALLOWED_SYSCALLS } from '../../../src/core/seccomp-syscalls.js';

/** Every rule that names this syscall. */
function rulesFor(name: string): SeccompRule[] {
  return SECCOMP_PROFILE.syscalls.filter((r) => r.names.includes(name));
}

describe('our seccomp profile (host privilege)', () => {
  it('is an allowlist: anything unnamed (fchmodat2 on an old libseccomp, a future call) is refused', () => {
    expect(SECCOMP_PROFILE.defaultAction).toBe('SCMP_ACT_ERRNO');
    expect(SECCOMP_PROFILE.archMap.map((a) => a.architecture)).toEqual([
      'SCMP_ARCH_X86_64',
      'SCMP_ARCH_AARCH64',
    ]);
  });

  it('allows a call that sets a mode only when the mode has neither S_ISUID nor S_ISGID, at its own argument', () => {
    expect(MODE_ARGUMENT).toEqual({
      chmod: 1,
      fchmod: 1,
      fchmodat: 2,
      open: 2,
      openat: 3,
      creat: 1,
      mknod: 1,
      mknodat: 2,
    });
    for (const [name, index] of Object.entries(MODE_ARGUMENT)) {
      expect(ALLOWED_SYSCALLS).not.toContain(name);
      expect(rulesFor(name)).toEqual([
        {
          names: [name],
          action: 'SCMP_ACT_ALLOW',
          args: [{ index, value: PRIVILEGE_MODE_BITS, valueTwo: 0, op: 'SCMP_CMP_MASKED_EQ' }],
        },
      ]);
    }
    expect(PRIVILEGE_MODE_BITS).toBe(0o4000 | 0o2000);
  });

  it('refuses what it cannot see into with ENOSYS (libc falls back) and never allows io_uring, namespaces, mounts', () => {
    for (const name of FALLBACK_SYSCALLS)
      expect(rulesFor(name)).toEqual([{ names: FALLBACK_SYSCALLS, action: 'SCMP_ACT_ERRNO', errnoRet: 38 }]);
    expect(FALLBACK_SYSCALLS).toEqual(['openat2', 'fchmodat2', 'clone3']);
    for (const name of [
      'io_uring_setup',
      'io_uring_enter',
      'io_uring_register',
      'setns',
      'mount',
      'bpf',
      'keyctl',
    ])
      expect(rulesFor(name)).toEqual([]);
    expect(rulesFor('unshare')).toEqual([
      {
        names: ['clone', 'unshare'],
        action: 'SCMP_ACT_ALLOW',
        args: [{ index: 0, value: NAMESPACE_CLONE_FLAGS, valueTwo: 0, op: 'SCMP_CMP_MASKED_EQ' }],
      },
    ]);
    // CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET.
    const flags = [0x20000, 0x2000000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000];
    expect(NAMESPACE_CLONE_FLAGS).toBe(flags.reduce((a, b) => a | b, 0));
  });

  it('names each syscall once and travels as the JSON itself', () => {
    const named = SECCOMP_PROFILE.syscalls.flatMap((r) => r.names);
    expect(new Set(named).size).toBe(named.length);
    expect(JSON.parse(SECCOMP_SECURITY_OPT.slice('seccomp='.length))).toEqual(SECCOMP_PROFILE);
  });
});
