import { describe, expect, it } from 'vitest';
import { hostPrivilegeCheck } from '../../../src/app/doctor/privilege-check.js';
import { hostPrivilegeProtections, userNamespaceOf } from '../../../src/core/host-privilege.js';

describe('user namespace detection (docker info SecurityOptions)', () => {
  it('a plain engine: container root is host root', () => {
    expect(
      userNamespaceOf({ securityOptions: ['name=seccomp,profile=default'], dataRoot: '/var/lib/docker' }),
    ).toEqual({
      kind: 'none',
    });
    expect(userNamespaceOf({})).toEqual({ kind: 'none' });
  });

  it('userns-remap: name=userns, the ids from the data root `<root>/<uid>.<gid>` (as engine 20.10 answers)', () => {
    const facts = {
      securityOptions: ['name=seccomp,profile=default', 'name=userns'],
      dataRoot: '/var/lib/docker/100000.100000',
    };
    expect(userNamespaceOf(facts)).toEqual({ kind: 'remap', uid: 100000, gid: 100000 });
    expect(userNamespaceOf({ ...facts, dataRoot: '/srv/docker' })).toEqual({
      kind: 'remap',
      uid: null,
      gid: null,
    });
    // `name=userns` must be the option's name, not a word inside another one.
    expect(userNamespaceOf({ securityOptions: ['name=seccomp,profile=/etc/userns.json'] })).toEqual({
      kind: 'none',
    });
  });

  it('a rootless engine (Docker or Podman) says name=rootless', () => {
    expect(userNamespaceOf({ securityOptions: ['name=seccomp,profile=default', 'name=rootless'] })).toEqual({
      kind: 'rootless',
    });
  });
});

describe('doctor: host privilege', () => {
  it('says which protections are on: our profile, the dropped capabilities, the sweep, the user namespace', () => {
    expect(hostPrivilegeProtections({}).capabilitiesDropped).toEqual(['FSETID', 'SETFCAP', 'MKNOD']);
    const plain = hostPrivilegeCheck({
      securityOptions: ['name=seccomp,profile=default'],
      dataRoot: '/var/lib/docker',
    });
    expect(plain.status).toBe('ok');
    expect(plain.detail).toContain('seccomp: ours');
    expect(plain.detail).toContain('CAP_FSETID, CAP_SETFCAP, CAP_MKNOD dropped');
    expect(plain.detail).toContain('container root is host root');
    expect(plain.facts).toEqual({
      seccomp: 'roboguide',
      capabilities_dropped: ['FSETID', 'SETFCAP', 'MKNOD'],
      user_namespace: { kind: 'none' },
      sweep: true,
    });
    const remapped = hostPrivilegeCheck({ securityOptions: ['name=userns'], dataRoot: '/d/231072.231072' });
    expect(remapped.detail).toContain('container root is host uid 231072 (gid 231072)');
    expect(remapped.facts?.['user_namespace']).toEqual({ kind: 'remap', uid: 231072, gid: 231072 });
  });
});
