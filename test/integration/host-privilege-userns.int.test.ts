import { chmod, chown, lstat, mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DockerContainerRuntime } from '../../src/adapters/docker/docker-container-runtime.js';
import { runPair } from '../../src/app/pair/run-pair.js';
import { hostPrivilegeCheck } from '../../src/app/doctor/privilege-check.js';
import { userNamespaceOf } from '../../src/core/host-privilege.js';
import type { ResultRecord } from '../../src/core/result.js';
import { DRIVER_IMAGE, noDocker, pairRunDeps } from '../support/docker.js';
import { namespaceSupportProblem, startSecondEngine, type SecondEngine } from '../support/second-engine.js';

/**
 * User-namespace remapping (docs/secrets.md "host privilege") on a throwaway engine started with
 * `--userns-remap=default`, in its own network namespace (the shared engine is never reconfigured). The engine says
 * so in SecurityOptions (`name=userns`) and keeps its data under `<root>/<uid>.<gid>`; a pair's outcome folder is
 * handed to that uid (before: every pair ended `outcome_missing`, its folder not writable from inside), and what a
 * pair writes on the host belongs to the remapped uid, not to root.
 */
const required = process.env['REQUIRE_DOCKER'] === '1';
const namespaceProblem = noDocker ? 'no Docker engine' : await namespaceSupportProblem();
const skip = namespaceProblem !== null && !required;
if (skip) console.warn(`\n*** host privilege under userns-remap SKIPPED: ${namespaceProblem} ***\n`);

let engine: SecondEngine | undefined;
let work: string;

beforeAll(async () => {
  if (skip) return;
  if (namespaceProblem !== null)
    throw new Error(`REQUIRE_DOCKER=1 but a second engine cannot be started: ${namespaceProblem}`);
  work = await mkdtemp(join(tmpdir(), 'rg-userns-'));
  engine = await startSecondEngine({
    nvidiaHook: false,
    name: 'userns',
    extraArgs: ['--userns-remap=default'],
  });
});

afterAll(async () => {
  await engine?.stop();
  if (work !== undefined) await rm(work, { recursive: true, force: true });
});

describe.skipIf(skip)('host privilege under userns-remap (second engine)', () => {
  it('detects the remap and its uid, opens the outcome folder to it, and the pair completes writing as that uid', async () => {
    const rt = new DockerContainerRuntime({ socketPath: engine!.socketPath });
    const info = await rt.info();
    const ns = userNamespaceOf(info);
    expect(ns).toMatchObject({ kind: 'remap' });
    const { uid, gid } = ns as { uid: number; gid: number };
    expect(uid).toBeGreaterThan(0);
    expect(hostPrivilegeCheck(info).detail).toContain(`container root is host uid ${uid}`);

    // The operator makes the cwd writable by the remapped root, through its group (doctor says so).
    const cwd = join(work, 'cwd');
    await mkdir(cwd, { recursive: true });
    await chown(cwd, 0, gid);
    await chmod(cwd, 0o775);
    await chmod(work, 0o755);
    const script =
      'cp /bin/busybox ./busybox; chmod 4755 busybox; echo "chmod=$?"; ' +
      'printf \'{"job_id":"%s","infrastructure_failure":false,"fatal_failure":false,"arms":[]}\' "$ROBOGUIDE_JOB_ID" > "$ROBOGUIDE_OUTCOME_PATH"';
    const run = await runPair(pairRunDeps(rt), {
      specText: JSON.stringify({
        job_id: 'userns-pair',
        argv: ['/bin/sh', '-c', script],
        cwd,
        outcome_path: join(work, 'out', 'outcome.json'),
        image: DRIVER_IMAGE,
        network: 'none',
        timeout_seconds: 60,
        stop_budget_seconds: 2,
      }),
      specSource: 'userns-pair.json',
      output: join(work, 'evidence'),
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 'test',
      cwd: work,
    });
    const result = JSON.parse(await readFile(join(run.output, 'result.json'), 'utf8')) as ResultRecord;
    expect(result.classification, JSON.stringify(result.reasons)).toBe('completed');
    expect(await readFile(join(run.output, 'stdout.log'), 'utf8')).toMatch(/^chmod=[1-9]$/m);
    const copied = await lstat(join(cwd, 'busybox'));
    expect({ uid: copied.uid, gid: copied.gid, mode: copied.mode & 0o7777 }).toEqual({
      uid,
      gid,
      mode: 0o755,
    });
    const outcomeDir = await lstat(join(run.output, 'outcome'));
    expect({ uid: outcomeDir.uid, gid: outcomeDir.gid, mode: outcomeDir.mode & 0o7777 }).toEqual({
      uid: 0,
      gid,
      mode: 0o770,
    });
  });
});
