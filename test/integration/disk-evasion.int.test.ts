import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DiskUsageBudget } from '../../src/app/ports/disk-usage.js';
import { runPair } from '../../src/app/pair/run-pair.js';
import type { RunPairOutcome } from '../../src/app/pair/run-pair-types.js';
import type { ResultRecord } from '../../src/core/result.js';
import { DRIVER_IMAGE, expectNoContainersLeft, noDocker, pairRunDeps, runtime } from '../support/docker.js';

/**
 * The disk limit against a pair that tries to hide what it holds (containment round two): a file deleted while
 * open, an image's VOLUME, and a cwd too big to walk while the bytes sit in the outcome folder. Each attack holds
 * 80 MiB against a 50 MiB limit and then sleeps 30 s: it must end in a controlled stop that names its reason, long
 * before the sleep ends, never `completed`.
 */
const rt = runtime();
const MIB = 1024 * 1024;
const LIMIT = 50 * MIB;
const HELD = 80 * MIB;
const VOLUME_IMAGE = 'roboguide/test-volume-data:1';
const WRITE_OWN =
  'printf \'{"job_id":"%s","infrastructure_failure":false,"fatal_failure":false,"arms":[]}\' "$ROBOGUIDE_JOB_ID" > "$ROBOGUIDE_OUTCOME_PATH"';
let work: string;
const jobs: string[] = [];

async function pairRun(
  jobId: string,
  script: string,
  extra: Record<string, unknown> = {},
  budget?: DiskUsageBudget,
): Promise<RunPairOutcome> {
  jobs.push(jobId);
  const dir = join(work, jobId);
  const spec = {
    job_id: jobId,
    argv: ['/bin/sh', '-c', script],
    cwd: join(dir, 'cwd'),
    outcome_path: join(dir, 'out', 'outcome.json'),
    image: DRIVER_IMAGE,
    timeout_seconds: 120,
    stop_budget_seconds: 2,
    disk_limit_bytes: LIMIT,
    ...extra,
  };
  return runPair(
    {
      ...pairRunDeps(rt),
      diskPollIntervalMs: 500,
      ...(budget !== undefined ? { diskWalkBudget: budget } : {}),
    },
    {
      specText: JSON.stringify(spec),
      specSource: `${jobId}.json`,
      output: join(dir, 'evidence'),
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 'test',
      cwd: work,
    },
  );
}

/** A controlled stop for `reason`, well before the pair's 30 s sleep ended. */
function expectStoppedFor(result: ResultRecord, reason: 'disk_limit_exceeded' | 'disk_unmeasurable'): void {
  expect(result.classification).toBe('infrastructure_failure');
  expect(result.reasons[0]).toBe(reason);
  expect(result.container.timed_out).toBe(false);
  expect(Date.parse(result.finished_at) - Date.parse(result.started_at)).toBeLessThan(20_000);
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'rg-disk-evasion-'));
});

afterAll(async () => {
  if (!noDocker) await expectNoContainersLeft(jobs);
  await rm(work, { recursive: true, force: true });
});

describe.skipIf(noDocker)('the disk limit against a pair that hides what it holds', () => {
  it.each([
    ['in its writable layer', 'unlinked-tmp', '/tmp/held'],
    ['in its cwd', 'unlinked-cwd', './held'],
  ])('a file deleted while open %s still counts: disk_limit_exceeded', async (_where, jobId, path) => {
    // Deleted before a byte is written: no walk and no layer size ever sees it.
    const script = `exec 3>${path}; rm ${path}; head -c ${HELD} /dev/zero >&3; sleep 30; ${WRITE_OWN}`;
    const run = await pairRun(jobId, script);
    expectStoppedFor(run.result, 'disk_limit_exceeded');
    expect(run.result.disk).toMatchObject({ exceeded: true, limit_bytes: LIMIT, enforced_by: 'measurement' });
    expect(run.result.disk!.unlinked_open_bytes).toBeGreaterThan(LIMIT);
    console.info(`${jobId}: ${JSON.stringify(run.result.disk)}`);
  });

  it.each([['/etc/hosts'], ['/etc/resolv.conf'], ['/etc/hostname']])(
    "the engine's own file %s, bind-mounted writable from its data root, is measured: disk_limit_exceeded",
    async (file) => {
      // The engine writes these under /var/lib/docker/containers/<id>/ and binds them read-write: no walk of the pair's
      // folders nor the layer's size sees what a pair writes into them (80 MiB ended completed with peak 20 KiB).
      const jobId = `engine-file-${basename(file).replace('.', '-')}`;
      const run = await pairRun(jobId, `head -c ${HELD} /dev/zero > ${file}; sleep 30; ${WRITE_OWN}`);
      expectStoppedFor(run.result, 'disk_limit_exceeded');
      expect(run.result.disk!.volume_bytes).toBeGreaterThan(LIMIT);
      console.info(`${jobId}: ${JSON.stringify(run.result.disk)}`);
    },
  );

  it('an image VOLUME is measured, and the anonymous volume goes with the container', async () => {
    execFileSync('docker', ['build', '-q', '-t', VOLUME_IMAGE, '-'], {
      input: `FROM ${DRIVER_IMAGE}\nVOLUME /data\n`,
      stdio: ['pipe', 'ignore', 'pipe'],
    });
    const jobId = 'volume-filler';
    const volumeDirs = new Set<string>();
    const sample = async (): Promise<void> => {
      for (const c of await rt.listByLabel({ 'roboguide.job': jobId })) {
        for (const d of (await rt.diskFootprint(c.id))?.volumeDirs ?? [])
          if (d.includes('/volumes/')) volumeDirs.add(d);
      }
    };
    const sampler = setInterval(() => void sample().catch(() => undefined), 100);
    let run: RunPairOutcome;
    try {
      run = await pairRun(jobId, `head -c ${HELD} /dev/zero > /data/filler; sleep 30; ${WRITE_OWN}`, {
        image: VOLUME_IMAGE,
      });
    } finally {
      clearInterval(sampler);
      execFileSync('docker', ['rmi', VOLUME_IMAGE], { stdio: 'ignore' });
    }
    expectStoppedFor(run.result, 'disk_limit_exceeded');
    expect(run.result.disk!.volume_bytes).toBeGreaterThan(LIMIT);
    // The engine's anonymous volume for /data was seen, and is gone with the container (removed with v=1).
    expect(volumeDirs.size).toBe(1);
    for (const d of volumeDirs) {
      await expect(stat(d)).rejects.toMatchObject({ code: 'ENOENT' });
      const name = basename(dirname(d));
      const volumes = execFileSync('docker', ['volume', 'ls', '-q'], { encoding: 'utf8' });
      expect(volumes.split('\n')).not.toContain(name);
    }
    console.info(`volume-filler: ${JSON.stringify(run.result.disk)}`);
  });

  it('a cwd too big to walk while the bytes sit in the outcome folder: disk_unmeasurable, and what stays is named', async () => {
    // 3,000 empty files in the cwd (there before the pair starts) against a walk budget of 1,000 entries (the
    // default is 2,000,000 or 5 s): the walk, cwd first, never reaches the outcome folder, where the pair writes.
    const jobId = 'unwalkable-cwd';
    const cwd = join(work, jobId, 'cwd');
    await mkdir(cwd, { recursive: true });
    for (let i = 0; i < 3_000; i++) await writeFile(join(cwd, `f${i}`), '');
    const script = `head -c ${HELD} /dev/zero > "$(dirname "$ROBOGUIDE_OUTCOME_PATH")/filler"; sleep 30; ${WRITE_OWN}`;
    const run = await pairRun(jobId, script, {}, { maxEntries: 1_000, maxMs: 5_000 });
    expectStoppedFor(run.result, 'disk_unmeasurable');
    const disk = run.result.disk!;
    expect(disk).toMatchObject({ unmeasurable: true, exceeded: false });
    expect(disk.incomplete_polls).toBeGreaterThanOrEqual(2);
    // What the pair left in the evidence (its stop may cut the write) is measured and named, as it is on disk.
    const kept = await stat(join(run.output, 'outcome', 'filler'));
    expect(kept.size).toBeGreaterThan(0);
    expect(disk.outcome_folder).toMatchObject({
      complete: true,
      largest: [{ path: 'filler', bytes: kept.blocks * 512 }],
    });
    expect(disk.outcome_folder!.bytes).toBeGreaterThanOrEqual(kept.blocks * 512);
    console.info(`${jobId}: ${JSON.stringify(disk)}`);
  });
});
