import { link, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { DiskFootprints } from '../../../../src/app/ports/runtime-capabilities.js';
import { DiskUsageWalker } from '../../../../src/adapters/fs/disk-usage-walker.js';
import { DISK_POLL_INTERVAL_MS, DiskWatch } from '../../../../src/app/pair/disk-watch.js';
import type { ContainerDiskFootprint } from '../../../../src/app/ports/container-runtime.js';
import type { DiskUsage, DiskUsageBudget, DiskUsageReport } from '../../../../src/app/ports/disk-usage.js';
import { silentLogger } from '../../../../src/app/ports/logger.js';
import { fakeTime } from '../../../support/fake-time.js';

/** Scripted walks: each measure returns the next report and moves the fake clock by its cost. */
class ScriptedDisk implements DiskUsage {
  readonly asked: { paths: readonly string[]; budget: DiskUsageBudget }[] = [];
  constructor(
    private readonly reports: (DiskUsageReport & { tookMs?: number })[],
    private readonly advance: (ms: number) => void,
  ) {}
  measure(paths: readonly string[], budget: DiskUsageBudget): Promise<DiskUsageReport> {
    this.asked.push({ paths, budget });
    const next = this.reports.shift() ?? { bytes: 0, entries: 0, complete: true };
    this.advance(next.tookMs ?? 0);
    return Promise.resolve({ bytes: next.bytes, entries: next.entries, complete: next.complete });
  }
}

function layers(
  sizes: (number | null)[],
  more: Partial<ContainerDiskFootprint> = {},
): DiskFootprints & { asked: string[] } {
  const asked: string[] = [];
  return {
    asked,
    diskFootprint: (id) => {
      asked.push(id);
      const layerBytes = sizes.shift() ?? 0;
      return Promise.resolve(layerBytes === null ? null : { layerBytes, volumeDirs: [], pid: null, ...more });
    },
  };
}

/** Lets the watch's loop run until it waits on `sleep` again (or ends). */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await Promise.resolve();
}

describe('DiskWatch', () => {
  it('counts the folders and the writable layer; past the limit it halts the pair and records it', async () => {
    const time = fakeTime();
    const sleeps: number[] = [];
    let release: () => void = () => undefined;
    const sleep = (ms: number, signal?: AbortSignal): Promise<void> => {
      sleeps.push(ms);
      if (signal?.aborted === true) return Promise.resolve();
      return new Promise((resolve) => {
        release = resolve;
        signal?.addEventListener('abort', () => resolve(), { once: true });
      });
    };
    const disk = new ScriptedDisk(
      [
        { bytes: 100, entries: 2, complete: true }, // the baseline: what the folders held before the pair ran
        { bytes: 500, entries: 3, complete: true },
        { bytes: 1000, entries: 5, complete: true },
      ],
      (ms) => time.advance(ms),
    );
    const runtime = layers([50, 200]);
    const watch = new DiskWatch(
      { disk, runtime, clock: { ...time.clock, sleep }, logger: silentLogger },
      { folders: ['/w/cwd', '/e/outcome'], limitBytes: 1000 },
    );
    watch.attach('c1');
    watch.start();
    await settle();
    release();
    await settle();
    expect(watch.halt.aborted).toBe(false); // 500 + 50 − 100
    release();
    await settle();
    expect(watch.halt.aborted).toBe(true); // 1000 + 200 − 100 > 1000
    expect(runtime.asked).toEqual(['c1', 'c1']);
    expect(disk.asked[0]!.paths).toEqual(['/w/cwd', '/e/outcome']);
    expect(sleeps[0]).toBe(DISK_POLL_INTERVAL_MS);
    const record = await watch.finish();
    // Once over the limit the loop ends: no further walk at collection.
    expect(record).toEqual({
      limit_bytes: 1000,
      baseline_bytes: 100,
      peak_bytes: 1200,
      exceeded: true,
      polls: 2,
      incomplete_polls: 0,
      unmeasurable: false,
      unlinked_open_bytes: 0,
      volume_bytes: 0,
      enforced_by: 'measurement',
    });
  });

  it('stretches the interval after a slow walk, so walks take at most a tenth of the time', async () => {
    const time = fakeTime();
    const sleeps: number[] = [];
    let polls = 0;
    const sleep = (ms: number): Promise<void> => {
      sleeps.push(ms);
      return Promise.resolve();
    };
    const disk: DiskUsage = {
      measure: () => {
        polls += 1; // the first is the baseline
        time.advance(polls === 2 ? 4_000 : 10);
        return Promise.resolve({ bytes: 1, entries: 1, complete: polls !== 2 });
      },
    };
    const watch = new DiskWatch(
      { disk, runtime: {}, clock: { ...time.clock, sleep }, logger: silentLogger },
      { folders: ['/w'], limitBytes: 10 },
    );
    watch.start();
    await settle();
    const record = await watch.finish();
    expect(sleeps.slice(0, 3)).toEqual([DISK_POLL_INTERVAL_MS, 40_000, DISK_POLL_INTERVAL_MS]);
    expect(record.incomplete_polls).toBe(1);
    expect(record.exceeded).toBe(false);
  });

  it('measures the folders once more at collection: a pair that filled its cwd just before it exited is caught', async () => {
    const time = fakeTime();
    const sleep = (_ms: number, signal?: AbortSignal): Promise<void> =>
      new Promise((resolve) =>
        signal?.aborted === true
          ? resolve()
          : signal?.addEventListener('abort', () => resolve(), { once: true }),
      );
    const disk = new ScriptedDisk(
      [
        { bytes: 3_000, entries: 2, complete: true },
        { bytes: 5_000, entries: 2, complete: true },
      ],
      (ms) => time.advance(ms),
    );
    const watch = new DiskWatch(
      { disk, runtime: layers([]), clock: { ...time.clock, sleep }, logger: silentLogger },
      { folders: ['/w'], limitBytes: 1_000 },
    );
    watch.start();
    await settle();
    const record = await watch.finish();
    // 3,000 bytes of inputs were there before: only the 2,000 added count, and they are over 1,000.
    expect(record).toMatchObject({ exceeded: true, baseline_bytes: 3_000, peak_bytes: 5_000, polls: 1 });
  });

  it('what the folders held before the pair ran does not count against its limit', async () => {
    const time = fakeTime();
    const disk = new ScriptedDisk(
      [
        { bytes: 50_000, entries: 2, complete: true },
        { bytes: 50_500, entries: 3, complete: true },
      ],
      (ms) => time.advance(ms),
    );
    const watch = new DiskWatch(
      {
        disk,
        runtime: {},
        clock: {
          ...time.clock,
          sleep: (_ms, signal) =>
            new Promise((resolve) => signal?.addEventListener('abort', () => resolve(), { once: true })),
        },
        logger: silentLogger,
      },
      { folders: ['/w'], limitBytes: 1_000 },
    );
    watch.start();
    await settle();
    const record = await watch.finish();
    expect(record).toMatchObject({ exceeded: false, baseline_bytes: 50_000, peak_bytes: 50_500 });
    expect(watch.halt.aborted).toBe(false);
  });

  it('a failed walk is logged, never thrown, and fails closed: the disk is unmeasurable', async () => {
    const time = fakeTime();
    const disk: DiskUsage = { measure: () => Promise.reject(new Error('EIO')) };
    const watch = new DiskWatch(
      { disk, runtime: {}, clock: { ...time.clock, sleep: () => Promise.resolve() }, logger: silentLogger },
      { folders: ['/w'], limitBytes: 1 },
    );
    const record = await watch.finish();
    expect(record).toMatchObject({ exceeded: false, unmeasurable: true, polls: 1, incomplete_polls: 1 });
  });
});

describe('DiskUsageWalker', () => {
  let dir: string | undefined;
  afterEach(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  it('counts allocated bytes under the folders, hard links once, links never followed, within its budget', async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-disk-walk-'));
    const cwd = join(dir, 'cwd');
    const outside = join(dir, 'outside');
    await mkdir(join(cwd, 'a', 'b'), { recursive: true });
    await mkdir(outside);
    await writeFile(join(cwd, 'a', 'b', 'big'), Buffer.alloc(1024 * 1024, 1));
    await link(join(cwd, 'a', 'b', 'big'), join(cwd, 'hard'));
    await writeFile(join(outside, 'elsewhere'), Buffer.alloc(4 * 1024 * 1024, 1));
    await symlink(outside, join(cwd, 'link'));
    const walker = new DiskUsageWalker();
    const report = await walker.measure([cwd, join(dir, 'missing')], { maxEntries: 1_000, maxMs: 10_000 });
    expect(report.complete).toBe(true);
    // 1 MiB of data (once, though linked twice) plus the folders' own blocks; the 4 MiB behind the link not at all.
    expect(report.bytes).toBeGreaterThanOrEqual(1024 * 1024);
    expect(report.bytes).toBeLessThan(2 * 1024 * 1024);
    expect(report.entries).toBe(6); // cwd, a, b, big, hard, link
    const cut = await walker.measure([cwd], { maxEntries: 2, maxMs: 10_000 });
    expect(cut.complete).toBe(false);
  });
});
