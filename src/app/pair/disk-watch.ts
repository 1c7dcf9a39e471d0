import { errorDetail } from '../../core/errors.js';
import { diskVerdict, type DiskVerdict } from '../../core/disk-rule.js';
import type { DiskRecord } from '../../core/result.js';
import type { Clock } from '../ports/clock.js';
import type { ContainerDiskFootprint } from '../ports/container-runtime.js';
import { canMeasureDisk } from '../ports/runtime-capabilities.js';
import type { DiskUsage, DiskUsageBudget, OpenFileScan } from '../ports/disk-usage.js';
import type { Logger } from '../ports/logger.js';

/** How often a running pair's disk use is measured, at least. */
export const DISK_POLL_INTERVAL_MS = 10_000;
/** The longest the interval stretches to when walks are slow. */
export const MAX_DISK_POLL_INTERVAL_MS = 300_000;
/** A walk may take at most this share of the interval: a slower walk stretches the next interval. */
export const DISK_POLL_DUTY = 0.1;
/** What one walk may cost; past it the walk stops and its (lower-bound) bytes are what is known. */
export const DISK_WALK_BUDGET: DiskUsageBudget = { maxEntries: 2_000_000, maxMs: 5_000 };

export interface DiskWatchDeps {
  readonly disk: DiskUsage;
  /** Scans the container's processes for files deleted while open; absent: they are not counted. */
  readonly openFiles?: OpenFileScan;
  /** The pair's runtime: with `DiskFootprints` its container's layer, volumes and process count too. */
  readonly runtime: object;
  readonly clock: Clock;
  readonly logger: Logger;
}

export interface DiskWatchOptions {
  /** The host folders the pair writes: its cwd and its private outcome folder. */
  readonly folders: readonly string[];
  /** The private outcome folder (one of `folders`): measured and named once more after the pair ended. */
  readonly outcomeFolder?: string;
  readonly limitBytes: number;
  readonly intervalMs?: number;
  readonly budget?: DiskUsageBudget;
}

/** One measurement's parts. */
interface Sample {
  readonly walkBytes: number;
  readonly layerBytes: number;
  readonly volumeBytes: number;
  readonly unlinkedBytes: number;
  readonly measured: boolean;
}

const NO_FOOTPRINT: ContainerDiskFootprint = { layerBytes: 0, volumeDirs: [], pid: null };

/**
 * The disk a running pair fills (issue 22; containment round two), measured as kubelet measures ephemeral storage
 * where no quota exists: the bytes in its cwd and outcome folder and in its container's volumes (a bounded walk),
 * its container's writable layer (the engine's `SizeRw`) and the files its processes hold open after deleting them
 * (a bounded scan of the host's `/proc`), every interval, and once more at collection (the layer and the volumes as
 * last measured: they go with the container). Past the limit, or unmeasurable (src/core/disk-rule.ts: a walk or a
 * scan that cannot finish fails closed), it aborts `halt`: the lifecycle stops the pair the controlled way (reason
 * `disk_limit_exceeded` or `disk_unmeasurable`) and the batch goes on. Each walk's cost is bounded
 * (DISK_WALK_BUDGET) and a slow walk stretches the interval, so the walks never take more than DISK_POLL_DUTY of
 * the supervisor's time.
 */
export class DiskWatch {
  readonly #deps: DiskWatchDeps;
  readonly #options: DiskWatchOptions;
  readonly #halt = new AbortController();
  readonly #stop = new AbortController();
  #containerId: string | null = null;
  #footprint: ContainerDiskFootprint = NO_FOOTPRINT;
  #baselineBytes = 0;
  #peakBytes = 0;
  #peakUnlinkedBytes = 0;
  #peakVolumeBytes = 0;
  #lastVolumeBytes = 0;
  #polls = 0;
  #incompletePolls = 0;
  #unmeasuredInRow = 0;
  /** Why the files held open after deletion could not be scanned on this host (not root, a remote engine), or null. */
  #openFilesUnscanned: string | null = null;
  #verdict: DiskVerdict = 'within';
  #loop: Promise<void> | null = null;

  constructor(deps: DiskWatchDeps, options: DiskWatchOptions) {
    this.#deps = deps;
    this.#options = options;
  }

  /** Aborted when the pair went past its disk limit or its disk could not be measured. */
  get halt(): AbortSignal {
    return this.#halt.signal;
  }

  /** Start measuring; the container's layer, volumes and open files are counted once `attach` names it. */
  start(): void {
    this.#loop ??= this.#run();
  }

  attach(containerId: string): void {
    this.#containerId = containerId;
  }

  get #budget(): DiskUsageBudget {
    return this.#options.budget ?? DISK_WALK_BUDGET;
  }

  async #run(): Promise<void> {
    await this.#measureBaseline();
    let intervalMs = this.#options.intervalMs ?? DISK_POLL_INTERVAL_MS;
    for (;;) {
      await this.#deps.clock.sleep(intervalMs, this.#stop.signal);
      if (this.#stop.signal.aborted || this.#verdict !== 'within') return;
      const tookMs = await this.#poll(false);
      // A slow walk (a huge cwd) stretches the interval so the walks stay a small share of the time.
      const base = this.#options.intervalMs ?? DISK_POLL_INTERVAL_MS;
      intervalMs = Math.min(MAX_DISK_POLL_INTERVAL_MS, Math.max(base, Math.ceil(tookMs / DISK_POLL_DUTY)));
    }
  }

  /**
   * What the folders hold before the pair runs (its inputs in `cwd`, another pair's files in a shared one): only
   * what is added beyond it counts against the limit. A failed walk leaves it 0 (everything counts).
   */
  async #measureBaseline(): Promise<void> {
    try {
      this.#baselineBytes = (await this.#deps.disk.measure(this.#options.folders, this.#budget)).bytes;
    } catch (err) {
      this.#deps.logger.warn(
        { err: errorDetail(err) },
        'disk baseline measurement failed: every byte counts',
      );
    }
  }

  /**
   * One measurement and its verdict; returns how long it took (ms). Never throws: a failed walk or scan is logged
   * and the measurement is unmeasured (it counts towards `disk_unmeasurable`).
   */
  async #poll(atCollection: boolean): Promise<number> {
    const startedMs = this.#deps.clock.now().getTime();
    if (!atCollection) this.#footprint = await this.#footprintNow();
    const sample = await this.#sample(this.#footprint, atCollection);
    this.#polls += 1;
    if (!sample.measured) this.#incompletePolls += 1;
    const total = sample.walkBytes + sample.volumeBytes + sample.layerBytes + sample.unlinkedBytes;
    this.#peakBytes = Math.max(this.#peakBytes, total);
    this.#peakUnlinkedBytes = Math.max(this.#peakUnlinkedBytes, sample.unlinkedBytes);
    this.#peakVolumeBytes = Math.max(this.#peakVolumeBytes, sample.volumeBytes);
    this.#lastVolumeBytes = sample.volumeBytes;
    const verdict = diskVerdict({
      addedBytes: total - this.#baselineBytes,
      limitBytes: this.#options.limitBytes,
      measured: sample.measured,
      unmeasuredBefore: this.#unmeasuredInRow,
      atCollection,
    });
    this.#unmeasuredInRow = sample.measured ? 0 : this.#unmeasuredInRow + 1;
    if (verdict !== 'within' && this.#verdict === 'within') {
      this.#verdict = verdict;
      this.#deps.logger.warn(
        { container: this.#containerId, bytes: total, limitBytes: this.#options.limitBytes, verdict },
        verdict === 'exceeded'
          ? 'disk limit exceeded: controlled stop'
          : 'disk could not be measured: controlled stop (fail closed)',
      );
      this.#halt.abort();
    }
    return this.#deps.clock.now().getTime() - startedMs;
  }

  /** The folders and the volumes (one walk, hard links once), and the files held open after their deletion. */
  async #sample(footprint: ContainerDiskFootprint, atCollection: boolean): Promise<Sample> {
    const budget = this.#budget;
    const volumes = atCollection ? [] : footprint.volumeDirs;
    const [walk, volumeWalk, unlinked] = await Promise.all([
      this.#deps.disk.measure(this.#options.folders, budget).catch((err: unknown) => this.#failed(err)),
      volumes.length === 0
        ? Promise.resolve({ bytes: atCollection ? this.#lastVolumeBytes : 0, complete: true })
        : this.#deps.disk.measure(volumes, budget).catch((err: unknown) => this.#failed(err)),
      this.#unlinked(footprint, atCollection),
    ]);
    return {
      walkBytes: walk.bytes,
      // At collection the volumes went with the container: what they held last counts.
      volumeBytes: volumeWalk.bytes,
      layerBytes: footprint.layerBytes,
      unlinkedBytes: unlinked.bytes,
      measured: walk.complete && volumeWalk.complete && unlinked.complete,
    };
  }

  async #unlinked(
    footprint: ContainerDiskFootprint,
    atCollection: boolean,
  ): Promise<{ bytes: number; complete: boolean }> {
    const scan = this.#deps.openFiles;
    const id = this.#containerId;
    // At collection the processes are gone, and with them their descriptors: those files were freed.
    if (atCollection || scan === undefined || footprint.pid === null || id === null)
      return { bytes: 0, complete: true };
    const found = await scan
      .unlinkedOpenFiles({ id, pid: footprint.pid }, this.#budget)
      .catch((err: unknown) => this.#failed(err));
    if ('unavailable' in found && found.unavailable !== undefined)
      this.#openFilesUnscanned ??= found.unavailable;
    return found;
  }

  #failed(err: unknown): { bytes: number; complete: false } {
    this.#deps.logger.warn(
      { container: this.#containerId, err: errorDetail(err) },
      'disk measurement failed',
    );
    return { bytes: 0, complete: false };
  }

  /** The container's layer, volumes and first process now; the last known when the engine cannot tell. */
  async #footprintNow(): Promise<ContainerDiskFootprint> {
    const id = this.#containerId;
    const { runtime } = this.#deps;
    if (id === null || !canMeasureDisk(runtime)) return this.#footprint;
    try {
      return (await runtime.diskFootprint(id)) ?? { ...this.#footprint, pid: null };
    } catch (err) {
      this.#deps.logger.warn(
        { container: id, err: errorDetail(err) },
        "the container's disk footprint could not be read: the last one counts",
      );
      return this.#footprint;
    }
  }

  /**
   * Ends the loop, measures the folders once more (the layer and volumes as last seen), names what stays in the
   * outcome folder, and reports.
   */
  async finish(): Promise<DiskRecord> {
    this.#stop.abort();
    await this.#loop;
    if (this.#verdict === 'within') await this.#poll(true);
    const outcomeFolder = await this.#outcomeFolder();
    return {
      limit_bytes: this.#options.limitBytes,
      baseline_bytes: this.#baselineBytes,
      peak_bytes: this.#peakBytes,
      exceeded: this.#verdict === 'exceeded',
      polls: this.#polls,
      incomplete_polls: this.#incompletePolls,
      unmeasurable: this.#verdict === 'unmeasurable',
      unlinked_open_bytes: this.#peakUnlinkedBytes,
      volume_bytes: this.#peakVolumeBytes,
      enforced_by: 'measurement',
      ...(this.#openFilesUnscanned !== null ? { open_files_unscanned: this.#openFilesUnscanned } : {}),
      ...(outcomeFolder !== null ? { outcome_folder: outcomeFolder } : {}),
    };
  }

  /** What stays in the evidence's outcome folder after the pair ended: measured and its largest files named. */
  async #outcomeFolder(): Promise<NonNullable<DiskRecord['outcome_folder']> | null> {
    const folder = this.#options.outcomeFolder;
    if (folder === undefined) return null;
    try {
      const walk = await this.#deps.disk.measure([folder], this.#budget);
      return {
        bytes: walk.bytes,
        entries: walk.entries,
        complete: walk.complete,
        largest: walk.largest ?? [],
      };
    } catch (err) {
      this.#failed(err);
      return null;
    }
  }
}
