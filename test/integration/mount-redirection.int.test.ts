import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Dockerode } from '../../src/adapters/docker/dockerode.js';
import { STAGING_ROOT } from '../../src/adapters/mount/engine-stager.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { runPair } from '../../src/app/pair/run-pair.js';
import type { RunPairOptions } from '../../src/app/pair/run-pair-types.js';
import { RoboguideServer, type StartedRoboguideServer } from '../../src/testing/index.js';
import {
  containersLabelled,
  DRIVER_IMAGE,
  noDocker,
  pairRunDeps,
  runtime,
  sweep,
} from '../support/docker.js';

/**
 * Mount redirection (containment round two): a hostile container swaps a folder of its own mount between a folder
 * and a link to the host's `/` in a tight loop, while another session or pair is made with that folder as its
 * source. Whatever the timing, no container may ever see outside its source: each try is refused with a named rule
 * or sees the harmless folder. On the code before the staged mounts, the session race reached `/` within the loop.
 */

const RUN = `it-mredir-${randomUUID().slice(0, 8)}`;
const LABEL = { 'it.mount.redirection': RUN };
const TRIES = 200;
/** Host `/` has it, the harmless folder never does. Only read, never written: every probe mount is read-only or only read. */
const PROBE = 'etc/os-release';
/**
 * The attacker: `sub` is a link to `/` for 3 ms, then a folder for 3 ms (every eighth time for 300 ms, so that some
 * creates find it still there when the engine mounts it), removed and made again in between.
 */
const SWAP = [
  'n=0; while :; do rm -rf /ws/sub; ln -s / /ws/sub; usleep 3000; rm -f /ws/sub; mkdir /ws/sub; n=$((n+1));',
  'if [ $((n % 8)) = 0 ]; then usleep 300000; else usleep 3000; fi; done',
].join(' ');

let work: string;
let ws: string;
const docker = new Dockerode();

/** A container of the attacker's, on the engine itself, swapping `ws/sub` until it is removed. */
async function startSwapper(): Promise<string> {
  const container = await docker.createContainer({
    Image: DRIVER_IMAGE,
    Entrypoint: ['/bin/sh', '-c', SWAP],
    Cmd: [],
    Labels: LABEL,
    HostConfig: { Binds: [`${ws}:/ws`], NetworkMode: 'none' },
  });
  await container.start();
  return container.id;
}

/** Every staging point on this host (all engines). */
async function stagingPoints(): Promise<string[]> {
  const points: string[] = [];
  for (const engine of await readdir(STAGING_ROOT).catch(() => [] as string[]))
    for (const name of await readdir(join(STAGING_ROOT, engine)).catch(() => [] as string[]))
      points.push(`${engine}/${name}`);
  return points;
}

/**
 * The staging points made since `before` by this test's processes (this one, and the server it started) and still
 * there: every one must be gone once its container is. A point is named `<pid>-<start ticks>-<n>` after the process
 * that made it; other processes on the host (CI's side suites beside this one, another suite) may hold points of
 * their own.
 */
async function stagedLeft(before: readonly string[]): Promise<string[]> {
  return (await stagingPoints()).filter((p) => !before.includes(p) && madeByUs(p));
}

function madeByUs(point: string): boolean {
  const [pid, start] = (point.split('/').at(-1) ?? '').split('-');
  for (let current = Number(pid), hops = 0; current > 1 && hops < 16; hops++) {
    const fields = statFields(current);
    if (fields === null) return false;
    if (hops === 0 && fields[19] !== start) return false; // the pid was reused: not the process that made the point
    if (current === process.pid) return true;
    current = Number(fields[1]);
  }
  return false;
}

/** The fields of /proc/PID/stat after the command (field 3, the state, first), or null when the process is gone. */
function statFields(pid: number): string[] | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

describe.skipIf(noDocker)('mount redirection: a source swapped for a link to / in a loop', () => {
  const servers: StartedRoboguideServer[] = [];

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-mredir-'));
    ws = join(work, 'ws');
    await mkdir(ws);
  });
  afterAll(async () => {
    await sweep(LABEL);
    for (const s of servers) await s.stop();
    // fs.rm never follows a link: `ws/sub` may be one to `/`.
    await rm(work, { recursive: true, force: true });
  });

  it(`a session never sees outside its source (${TRIES} creates racing a container that swaps it)`, async () => {
    const before = await stagingPoints();
    const s = await new RoboguideServer({ clientMode: 'raw' }).start();
    servers.push(s);
    const swapper = await startSwapper();
    const seen = { refused: 0, vanished: 0, harmless: 0, leaked: 0 };
    const rules = new Map<string, number>();
    // A live session's staging point is counted as the server's (the count below is not blind to its points).
    let liveCounted = false;
    try {
      for (let i = 0; i < TRIES; i++) {
        const res = await s.client.call<{ session_id: string }>('POST', '/v1/sessions', {
          body: {
            image: DRIVER_IMAGE,
            labels: LABEL,
            mounts: [{ source: join(ws, 'sub'), target: '/m', read_only: true }],
          },
        });
        if (res.status === 400) {
          seen.refused++;
          const text = JSON.stringify(res.body);
          expect(text).toContain('mounts[0].source');
          const rule =
            /is a symbolic link|does not exist|must not be \/|could not be staged/.exec(text)?.[0] ?? text;
          rules.set(rule, (rules.get(rule) ?? 0) + 1);
          continue;
        }
        if (
          (res.status === 409 && JSON.stringify(res.body).includes('E_MOUNT_SOURCE_GONE')) ||
          (res.status === 500 && /no such file or directory|does not exist/.test(JSON.stringify(res.body)))
        ) {
          // The folder was removed between the check and the start: the engine cannot mount what is gone.
          seen.vanished++;
          continue;
        }
        expect(res.status, JSON.stringify(res.body)).toBe(201);
        const id = res.body.session_id;
        const out = await s.client.call<{ stdout: string }>('POST', `/v1/sessions/${id}/exec`, {
          body: { command: `test -e /m/${PROBE} && echo LEAKED; true` },
        });
        if (out.body.stdout.includes('LEAKED')) seen.leaked++;
        else seen.harmless++;
        liveCounted ||= (await stagedLeft(before)).length > 0;
        expect((await s.client.call('DELETE', `/v1/sessions/${id}`)).status).toBeLessThan(300);
      }
    } finally {
      await docker.getContainer(swapper).remove({ force: true });
    }
    console.log(`session race, ${TRIES} tries:`, seen, Object.fromEntries(rules));
    expect(seen.leaked).toBe(0);
    // Both sides of the race were reached: the check refused links, and folders were mounted.
    expect(seen.harmless).toBeGreaterThan(0);
    expect(seen.refused).toBeGreaterThan(0);
    if (process.getuid?.() === 0)
      expect(liveCounted, 'a live session has a staging point of the server').toBe(true);
    expect(await stagedLeft(before)).toEqual([]);
  }, 240_000);

  it(`a pair never sees outside its cwd (${TRIES} pair runs racing a container that swaps it)`, async () => {
    const before = await stagingPoints();
    const swapper = await startSwapper();
    const seen = { refusedAtSpec: 0, refusedAtLaunch: 0, harmless: 0, leaked: 0 };
    const rules = new Map<string, number>();
    const deps = pairRunDeps(runtime());
    try {
      for (let i = 0; i < TRIES; i++) {
        const jobId = `${RUN}-p${i}`;
        const outcome = await runPair(deps, {
          specText: JSON.stringify({
            job_id: jobId,
            argv: ['/bin/sh', '-c', `test -e ${PROBE} && echo LEAKED; true`],
            cwd: join(ws, 'sub'),
            outcome_path: join(work, 'out', jobId, 'outcome.json'),
            environment: {},
            ports: [],
            timeout_seconds: 60,
            image: DRIVER_IMAGE,
          }),
          specSource: `${jobId}.json`,
          output: join(work, 'evidence', jobId),
          bindAddress: '127.0.0.1',
          environment: {},
          codeVersion: 'test',
          cwd: work,
        }).catch((err: unknown) => err as Error);
        if (outcome instanceof Error) {
          seen.refusedAtSpec++;
          expect(outcome.message).toMatch(/spec|cwd/);
          continue;
        }
        const stdout = await readFile(join(outcome.output, 'jobs', jobId, 'stdout.log'), 'utf8').catch(
          () => '',
        );
        if (stdout.includes('LEAKED')) seen.leaked++;
        if (outcome.result.reasons.includes('mount_refused')) {
          seen.refusedAtLaunch++;
          const message = outcome.result.engine_error?.message ?? '';
          expect(message).toMatch(/^cwd: /);
          const rule =
            /is a symbolic link|does not exist|was replaced|vanished|could not be staged/.exec(
              message,
            )?.[0] ?? message;
          rules.set(rule, (rules.get(rule) ?? 0) + 1);
        } else if (!stdout.includes('LEAKED')) seen.harmless++;
        expect(outcome.result.cleanup.verified_absent).toBe(true);
        await rm(join(work, 'evidence', jobId), { recursive: true, force: true });
      }
    } finally {
      await docker.getContainer(swapper).remove({ force: true });
    }
    console.log(`pair race, ${TRIES} tries:`, seen, Object.fromEntries(rules));
    expect(seen.leaked).toBe(0);
    expect(seen.harmless).toBeGreaterThan(0);
    expect(seen.refusedAtLaunch + seen.refusedAtSpec).toBeGreaterThan(0);
    expect(await stagedLeft(before)).toEqual([]);
  }, 300_000);

  it('one host-wide record of writable sources: nested ones are refused across sessions and pair runs, named', async () => {
    const s = await new RoboguideServer({ clientMode: 'raw' }).start();
    servers.push(s);
    const shared = join(work, 'shared');
    await mkdir(join(shared, 'sub'), { recursive: true });
    const session = async (source: string, readOnly = false) =>
      s.client.call<{
        session_id: string;
        error?: { code: string; issues: { path: string; rule: string }[] };
      }>('POST', '/v1/sessions', {
        body: { image: DRIVER_IMAGE, labels: LABEL, mounts: [{ source, target: '/m', read_only: readOnly }] },
      });
    const a = await session(shared);
    expect(a.status).toBe(201);
    // Inside it, or holding it: refused with the mount named; the same folder, or read-only, is allowed.
    for (const source of [join(shared, 'sub'), work]) {
      const nested = await session(source);
      expect(nested.status).toBe(409);
      expect(nested.body.error?.code).toBe('E_MOUNT_NESTED');
      expect(nested.body.error?.issues[0]).toMatchObject({
        path: 'mounts[0].source',
        rule: /lies inside, or holds/,
      });
    }
    for (const [source, readOnly] of [
      [shared, false],
      [join(shared, 'sub'), true],
    ] as const) {
      const allowed = await session(source, readOnly);
      expect(allowed.status).toBe(201);
      await s.client.call('DELETE', `/v1/sessions/${allowed.body.session_id}`);
    }
    // A pair run in the same registry, its cwd inside the session's writable source: refused before anything runs.
    const registry = SqliteCapacityRegistry.open({ path: s.registryPath });
    const pairRun = (jobId: string, cwd: string): RunPairOptions => ({
      specText: JSON.stringify({
        job_id: jobId,
        argv: ['/bin/sh', '-c', 'true'],
        cwd,
        outcome_path: join(work, 'out', jobId, 'outcome.json'),
        environment: {},
        ports: [],
        timeout_seconds: 60,
        image: DRIVER_IMAGE,
      }),
      specSource: `${jobId}.json`,
      output: join(work, 'evidence', jobId),
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 'test',
      cwd: work,
    });
    try {
      const deps = { ...pairRunDeps(runtime()), registry };
      await expect(runPair(deps, pairRun(`${RUN}-nested`, join(shared, 'sub')))).rejects.toThrow(
        /^cwd: .*shared\/sub lies inside, or holds, .*shared, the writable mount of a running container/,
      );
      expect(await containersLabelled({ 'roboguide.job': `${RUN}-nested` })).toEqual([]);
      // Released with the session's removal: the same pair runs.
      expect((await s.client.call('DELETE', `/v1/sessions/${a.body.session_id}`)).status).toBeLessThan(300);
      const ran = await runPair(deps, pairRun(`${RUN}-after`, join(shared, 'sub')));
      expect(ran.result.reasons).not.toContain('mount_refused');
      expect(ran.result.engine_error ?? null).toBeNull();
      expect(ran.result.cleanup.verified_absent).toBe(true);
    } finally {
      await registry.close();
    }
  });

  it("a running pair's evidence is no session's to mount: its private outcome folder (even as an equal source), its evidence folder, a folder holding it: 409, named; its verdict stays its own", async () => {
    const s = await new RoboguideServer({ clientMode: 'raw' }).start();
    servers.push(s);
    const registry = SqliteCapacityRegistry.open({ path: s.registryPath });
    const jobId = `${RUN}-evidence`;
    const output = join(work, 'evidence-held', jobId);
    const cwd = join(work, 'evidence-cwd');
    await mkdir(cwd, { recursive: true });
    const writeOwn =
      'printf \'{"job_id":"%s","infrastructure_failure":false,"fatal_failure":false,"arms":[{"arm":"A","verdict":"own"}]}\' "$ROBOGUIDE_JOB_ID" > "$ROBOGUIDE_OUTCOME_PATH"';
    try {
      const running = runPair(
        { ...pairRunDeps(runtime()), registry },
        {
          specText: JSON.stringify({
            job_id: jobId,
            argv: ['/bin/sh', '-c', `sleep 6; ${writeOwn}`],
            cwd,
            outcome_path: join(work, 'evidence-out', 'outcome.json'),
            environment: {},
            ports: [],
            timeout_seconds: 60,
            image: DRIVER_IMAGE,
          }),
          specSource: `${jobId}.json`,
          output,
          bindAddress: '127.0.0.1',
          environment: {},
          codeVersion: 'test',
          cwd: work,
        },
      );
      const outcomeFolder = join(output, 'outcome');
      for (let i = 0; i < 100 && (await containersLabelled({ 'roboguide.job': jobId })).length === 0; i++)
        await new Promise((r) => setTimeout(r, 100));
      for (const [source, readOnly] of [
        [outcomeFolder, false],
        [output, false],
        [join(work, 'evidence-held'), false],
        // Read-only too: it would read the raw outcome (secrets unmasked) while the pair runs.
        [outcomeFolder, true],
      ] as const) {
        const res = await s.client.call<{
          error?: { code: string; issues: { path: string; rule: string }[] };
        }>('POST', '/v1/sessions', {
          body: {
            image: DRIVER_IMAGE,
            labels: LABEL,
            mounts: [{ source, target: '/m', read_only: readOnly }],
          },
        });
        expect(res.status, `${source}: ${JSON.stringify(res.body)}`).toBe(409);
        expect(res.body.error?.code).toBe('E_MOUNT_NESTED');
        expect(res.body.error?.issues[0]?.rule).toMatch(/a running pair's evidence/);
      }
      const ran = await running;
      expect(ran.result).toMatchObject({
        classification: 'completed',
        outcome: { arms: [{ verdict: 'own' }] },
      });
    } finally {
      await registry.close();
    }
  });
});
