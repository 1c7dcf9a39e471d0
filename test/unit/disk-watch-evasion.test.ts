import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { DiskFootprints } from '../../src/app/ports/runtime-capabilities.js';
import { DiskUsageWalker } from '../../src/adapters/fs/disk-usage-walker.js';
import { DiskWatch } from '../../src/app/pair/disk-watch.js';
import type { ContainerDiskFootprint } from '../../src/app/ports/container-runtime.js';
import type {
  DiskUsage,
  DiskUsageBudget,
  DiskUsageReport,
  OpenFileScan,
  UnlinkedOpenFiles,
} from '../../src/app/ports/disk-usage.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import { diskVerdict, UNMEASURED_POLLS_TO_STOP } from '../../src/core/disk-rule.js';
import { classify } from '../../src/core/classify.js';
import { fakeTime } from '../support/fake-time.js';

/** Walks answered by path: each folder list gets the next report scripted for it. */
class WalksByPath implements DiskUsage {
  readonly asked: (readonly string[])[] = [];
  constructor(private readonly script: Map<string, DiskUsageReport[]>) {}
  measure(paths: readonly string[], _budget: DiskUsageBudget): Promise<DiskUsageReport> {
    this.asked.push(paths);
    const queue = this.script.get(paths.join(',')) ?? [];
    const next = queue.length > 1 ? queue.shift()! : queue[0];
    return Promise.resolve(next ?? { bytes: 0, entries: 0, complete: true });
  }
}

class ScriptedScan implements OpenFileScan {
  readonly asked: { id: string; pid: number }[] = [];
  constructor(private readonly answer: UnlinkedOpenFiles) {}
  unlinkedOpenFiles(container: { id: string; pid: number }): Promise<UnlinkedOpenFiles> {
    this.asked.push(container);
    return Promise.resolve(this.answer);
  }
}

function footprintOf(footprint: ContainerDiskFootprint): DiskFootprints {
  return { diskFootprint: () => Promise.resolve(footprint) };
}

/** A sleep the test releases one interval at a time. */
function steppedSleep(): { sleep: (ms: number, signal?: AbortSignal) => Promise<void>; step: () => void } {
  let release: () => void = () => undefined;
  return {
    sleep: (_ms, signal) =>
      signal?.aborted === true
        ? Promise.resolve()
        : new Promise((resolve) => {
            release = resolve;
            signal?.addEventListener('abort', () => resolve(), { once: true });
          }),
    step: () => release(),
  };
}

async function settle(): Promise<void> {
  for (let i = 0; i < 30; i++) await Promise.resolve();
}

const complete = (bytes: number): DiskUsageReport => ({ bytes, entries: 1, complete: true });
const cut = (bytes: number): DiskUsageReport => ({ bytes, entries: 1_000, complete: false });

describe('the disk rule (core)', () => {
  it('a lower bound past the limit is past it; unmeasured polls in a row, or at collection, are unmeasurable', () => {
    const base = { limitBytes: 100, unmeasuredBefore: 0, atCollection: false };
    expect(diskVerdict({ ...base, addedBytes: 101, measured: false })).toBe('exceeded');
    expect(diskVerdict({ ...base, addedBytes: 50, measured: true })).toBe('within');
    expect(diskVerdict({ ...base, addedBytes: 50, measured: false })).toBe('within');
    expect(
      diskVerdict({
        ...base,
        addedBytes: 50,
        measured: false,
        unmeasuredBefore: UNMEASURED_POLLS_TO_STOP - 1,
      }),
    ).toBe('unmeasurable');
    expect(diskVerdict({ ...base, addedBytes: 0, measured: false, atCollection: true })).toBe('unmeasurable');
  });

  it('disk_unmeasurable is a controlled stop, never completed', () => {
    const classified = classify({
      jobId: 'j',
      outcome: { kind: 'missing' },
      timedOut: false,
      diskUnmeasurable: true,
      terminated: false,
      engineFault: null,
      harnessFaults: [],
      allowedHttpStatuses: [],
    });
    expect(classified).toEqual({
      classification: 'infrastructure_failure',
      reasons: ['disk_unmeasurable', 'outcome_missing'],
    });
  });
});

describe('DiskWatch against the ways around it', () => {
  it('counts files held open after their deletion, from the container first process on', async () => {
    const { sleep, step } = steppedSleep();
    const disk = new WalksByPath(new Map([['/w,/o', [complete(10)]]]));
    const scan = new ScriptedScan({ bytes: 2_000, files: 1, entries: 7, complete: true });
    const watch = new DiskWatch(
      {
        disk,
        openFiles: scan,
        runtime: footprintOf({ layerBytes: 0, volumeDirs: [], pid: 4242 }),
        clock: { ...fakeTime().clock, sleep },
        logger: silentLogger,
      },
      { folders: ['/w', '/o'], limitBytes: 1_000 },
    );
    watch.attach('c1');
    watch.start();
    await settle();
    step();
    await settle();
    expect(scan.asked).toEqual([{ id: 'c1', pid: 4242 }]);
    expect(watch.halt.aborted).toBe(true);
    expect(await watch.finish()).toMatchObject({
      exceeded: true,
      unmeasurable: false,
      unlinked_open_bytes: 2_000,
      peak_bytes: 2_010,
    });
  });

  it("walks the container's volumes (an image VOLUME) and keeps their last bytes at collection", async () => {
    const { sleep, step } = steppedSleep();
    const disk = new WalksByPath(
      new Map([
        ['/w,/o', [complete(10)]],
        ['/var/lib/docker/volumes/v1/_data', [complete(400), complete(1_500)]],
      ]),
    );
    const watch = new DiskWatch(
      {
        disk,
        runtime: footprintOf({ layerBytes: 5, volumeDirs: ['/var/lib/docker/volumes/v1/_data'], pid: null }),
        clock: { ...fakeTime().clock, sleep },
        logger: silentLogger,
      },
      { folders: ['/w', '/o'], limitBytes: 1_000 },
    );
    watch.attach('c1');
    watch.start();
    await settle();
    step();
    await settle();
    expect(watch.halt.aborted).toBe(false); // 10 + 400 + 5 − 10
    step();
    await settle();
    expect(watch.halt.aborted).toBe(true); // 10 + 1,500 + 5 − 10
    expect(await watch.finish()).toMatchObject({ exceeded: true, volume_bytes: 1_500, peak_bytes: 1_515 });
  });

  it('walks that cannot finish stop the pair as unmeasurable after UNMEASURED_POLLS_TO_STOP in a row', async () => {
    const { sleep, step } = steppedSleep();
    const disk = new WalksByPath(new Map([['/w,/o', [complete(0), cut(0), complete(0), cut(0), cut(0)]]]));
    const watch = new DiskWatch(
      { disk, runtime: {}, clock: { ...fakeTime().clock, sleep }, logger: silentLogger },
      { folders: ['/w', '/o'], limitBytes: 1_000 },
    );
    watch.start();
    await settle();
    for (let i = 0; i < 3; i++) {
      step();
      await settle();
      expect(watch.halt.aborted, `poll ${i + 1}`).toBe(false); // cut, complete, cut: never two in a row
    }
    step();
    await settle();
    expect(watch.halt.aborted).toBe(true);
    expect(await watch.finish()).toMatchObject({
      exceeded: false,
      unmeasurable: true,
      polls: 4,
      incomplete_polls: 3,
    });
  });

  it('an open-file scan that cannot read the fd tables is unmeasured like a cut walk', async () => {
    const { sleep, step } = steppedSleep();
    const watch = new DiskWatch(
      {
        disk: new WalksByPath(new Map()),
        openFiles: new ScriptedScan({ bytes: 0, files: 0, entries: 0, complete: false }),
        runtime: footprintOf({ layerBytes: 0, volumeDirs: [], pid: 7 }),
        clock: { ...fakeTime().clock, sleep },
        logger: silentLogger,
      },
      { folders: ['/w'], limitBytes: 1_000 },
    );
    watch.attach('c1');
    watch.start();
    await settle();
    step();
    await settle();
    step();
    await settle();
    expect(watch.halt.aborted).toBe(true);
    expect(await watch.finish()).toMatchObject({ unmeasurable: true, incomplete_polls: 2 });
  });

  it('a scan this host cannot run at all (not root, a remote engine) is named in the record, never counted as unmeasured', async () => {
    const { sleep, step } = steppedSleep();
    const watch = new DiskWatch(
      {
        disk: new WalksByPath(new Map()),
        openFiles: new ScriptedScan({
          bytes: 0,
          files: 0,
          entries: 0,
          complete: true,
          unavailable: 'the supervisor is not root',
        }),
        runtime: footprintOf({ layerBytes: 0, volumeDirs: [], pid: 7 }),
        clock: { ...fakeTime().clock, sleep },
        logger: silentLogger,
      },
      { folders: ['/w'], limitBytes: 1_000 },
    );
    watch.attach('c1');
    watch.start();
    for (let i = 0; i < 3; i++) {
      await settle();
      step();
    }
    await settle();
    expect(watch.halt.aborted).toBe(false);
    expect(await watch.finish()).toMatchObject({
      unmeasurable: false,
      incomplete_polls: 0,
      open_files_unscanned: 'the supervisor is not root',
    });
  });

  it('a last walk at collection that cannot finish is unmeasurable; the outcome folder is measured and named', async () => {
    const disk = new WalksByPath(
      new Map([
        ['/w,/o', [complete(0), cut(0)]],
        ['/o', [{ bytes: 9_000, entries: 2, complete: true, largest: [{ path: 'filler', bytes: 8_192 }] }]],
      ]),
    );
    const watch = new DiskWatch(
      {
        disk,
        runtime: {},
        clock: { ...fakeTime().clock, sleep: steppedSleep().sleep },
        logger: silentLogger,
      },
      { folders: ['/w', '/o'], outcomeFolder: '/o', limitBytes: 100_000 },
    );
    watch.start();
    await settle();
    expect(await watch.finish()).toMatchObject({
      unmeasurable: true,
      exceeded: false,
      outcome_folder: {
        bytes: 9_000,
        entries: 2,
        complete: true,
        largest: [{ path: 'filler', bytes: 8_192 }],
      },
    });
  });
});

describe('DiskUsageWalker names the largest files', () => {
  let dir: string | undefined;
  afterEach(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  it('most bytes first, relative to the folder, at most five', async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-disk-largest-'));
    await mkdir(join(dir, 'sub'));
    for (let i = 1; i <= 7; i++)
      await writeFile(join(dir, i === 7 ? 'sub/top' : `f${i}`), Buffer.alloc(i * 8192, 1));
    const report = await new DiskUsageWalker().measure([dir], { maxEntries: 100, maxMs: 10_000 });
    expect(report.largest?.map((e) => e.path)).toEqual(['sub/top', 'f6', 'f5', 'f4', 'f3']);
    expect(report.largest?.[0]?.bytes).toBeGreaterThanOrEqual(7 * 8192);
  });
});
