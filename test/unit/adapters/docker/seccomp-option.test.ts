import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EngineSeccompOption, writeProfileFile } from '../../../../src/adapters/docker/seccomp-option.js';
import type { VersionBody } from '../../../../src/adapters/docker/engine-probe.js';
import { SECCOMP_PROFILE, SECCOMP_SECURITY_OPT } from '../../../../src/core/seccomp-profile.js';

const DOCKER: VersionBody = { Version: '20.10.24', ApiVersion: '1.41', Components: [{ Name: 'Engine' }] };
const PODMAN: VersionBody = {
  Version: '4.3.1',
  ApiVersion: '1.41',
  Components: [{ Name: 'Podman Engine', Version: '4.3.1' }],
};

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-seccomp-opt-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('our seccomp profile as each engine takes it', () => {
  it('Docker: the JSON itself, nothing written', async () => {
    const option = new EngineSeccompOption(() => Promise.resolve(DOCKER), join(dir, 'profiles'));
    expect(await option.option()).toBe(SECCOMP_SECURITY_OPT);
    await expect(readFile(join(dir, 'profiles'))).rejects.toThrow(/ENOENT/);
  });

  it("Podman: a file's path (its Docker API reads a path there), the file holding exactly our profile", async () => {
    const option = new EngineSeccompOption(() => Promise.resolve(PODMAN), join(dir, 'profiles'));
    const opt = await option.option();
    expect(opt).toMatch(new RegExp(`^seccomp=${join(dir, 'profiles')}/seccomp-[0-9a-f]{16}\\.json$`));
    expect(JSON.parse(await readFile(opt.slice('seccomp='.length), 'utf8'))).toEqual(SECCOMP_PROFILE);
  });

  it('asks the engine once, and again after a failed answer', async () => {
    let calls = 0;
    const option = new EngineSeccompOption(() => {
      calls += 1;
      return calls === 1 ? Promise.reject(new Error('engine down')) : Promise.resolve(DOCKER);
    }, dir);
    await expect(option.option()).rejects.toThrow('engine down');
    expect(await option.option()).toBe(SECCOMP_SECURITY_OPT);
    expect(await option.option()).toBe(SECCOMP_SECURITY_OPT);
    expect(calls).toBe(2);
  });

  it('refuses a profile folder others can write (whoever replaces the file lifts the profile)', async () => {
    await chmod(dir, 0o777);
    await expect(writeProfileFile(dir)).rejects.toThrow(/not writable by others/);
  });
});
