import { errorDetail } from '../core/errors.js';
import type { DiskRecord } from '../core/result.js';
import type { Clock } from './ports/clock.js';
import type { ContainerRuntime } from './ports/container-runtime.js';
import type { DiskUsage, DiskUsageBudget } from './ports/disk-usage.js';
import type { Logger } from './ports/logger.js';

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
  readonly runtime: Pick<ContainerRuntime, 'writableLayerBytes'>;
  readonly clock: Clock;
  readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  readonly logger: Logger;
}

export interface DiskWatchOptions {
  /** The host folders the pair writes: its cwd and its private outcome folder. */
  readonly folders: readonly string[];
  readonly limitBytes: number;
  readonly intervalMs?: number;
  readonly budget?: DiskUsageBudget;
}

/**
 * The disk a running pair fills (issue 22), measured as kubelet measures ephemeral storage where no quota exists:
 * the bytes in its cwd and outcome folder (a bounded walk) plus its container's writable layer (the engine's
 * `SizeRw`), every interval, and the folders once more at collection (the layer as last
 * measured: it goes with the container). Past the limit it aborts `halt`: the lifecycle stops the pair
 * the controlled way (reason `disk_limit_exceeded`) and the batch goes on. Each walk's cost is bounded
 * (DISK_WALK_BUDGET) and a slow walk stretches the interval, so the walks never take more than DISK_POLL_DUTY of
 * the supervisor's time.
 */
export class DiskWatch {
  readonly #deps: DiskWatchDeps;
  readonly #options: DiskWatchOptions;
  readonly #halt = new AbortController();
  readonly #stop = new AbortController();
  #containerId: string | null = null;
  #layerBytes = 0;
  #baselineBytes = 0;
  #peakBytes = 0;
  #polls = 0;
  #incompletePolls = 0;
  #exceeded = false;
  #loop: Promise<void> | null = null;

  constructor(deps: DiskWatchDeps, options: DiskWatchOptions) {
    this.#deps = deps;
    this.#options = options;
  }

  /** Aborted when the pair went past its disk limit. */
  get halt(): AbortSignal {
    return this.#halt.signal;
  }

  /** Start measuring; the container's layer is counted once `attach` names it. */
  start(): void {
    this.#loop ??= this.#run();
  }

  attach(containerId: string): void {
    this.#containerId = containerId;
  }

  async #run(): Promise<void> {
    await this.#measureBaseline();
    let intervalMs = this.#options.intervalMs ?? DISK_POLL_INTERVAL_MS;
    for (;;) {
      await this.#deps.sleep(intervalMs, this.#stop.signal);
      if (this.#stop.signal.aborted || this.#exceeded) return;
      const tookMs = await this.#poll(true);
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
      this.#baselineBytes = (
        await this.#deps.disk.measure(this.#options.folders, this.#options.budget ?? DISK_WALK_BUDGET)
      ).bytes;
    } catch (err) {
      this.#deps.logger.warn(
        { err: errorDetail(err) },
        'disk baseline measurement failed: every byte counts',
      );
    }
  }

  /** One measurement; returns how long it took (ms). Never throws: a failed measurement is logged and skipped. */
  async #poll(withLayer: boolean): Promise<number> {
    const startedMs = this.#deps.clock.now().getTime();
    try {
      const [walk, layer] = await Promise.all([
        this.#deps.disk.measure(this.#options.folders, this.#options.budget ?? DISK_WALK_BUDGET),
        withLayer ? this.#layer() : Promise.resolve(this.#layerBytes),
      ]);
      this.#layerBytes = layer;
      this.#polls += 1;
      if (!walk.complete) this.#incompletePolls += 1;
      const total = walk.bytes + layer;
      this.#peakBytes = Math.max(this.#peakBytes, total);
      if (total - this.#baselineBytes > this.#options.limitBytes && !this.#exceeded) {
        this.#exceeded = true;
        this.#deps.logger.warn(
          { container: this.#containerId, bytes: total, limitBytes: this.#options.limitBytes },
          'disk limit exceeded: controlled stop',
        );
        this.#halt.abort();
      }
    } catch (err) {
      this.#deps.logger.warn(
        { container: this.#containerId, err: errorDetail(err) },
        'disk measurement failed',
      );
    }
    return this.#deps.clock.now().getTime() - startedMs;
  }

  async #layer(): Promise<number> {
    const id = this.#containerId;
    if (id === null || this.#deps.runtime.writableLayerBytes === undefined) return this.#layerBytes;
    return (await this.#deps.runtime.writableLayerBytes(id)) ?? this.#layerBytes;
  }

  /** Ends the loop, measures the folders once more (the layer as last seen) and reports. */
  async finish(): Promise<DiskRecord> {
    this.#stop.abort();
    await this.#loop;
    if (!this.#exceeded) await this.#poll(false);
    return {
      limit_bytes: this.#options.limitBytes,
      baseline_bytes: this.#baselineBytes,
      peak_bytes: this.#peakBytes,
      exceeded: this.#exceeded,
      polls: this.#polls,
      incomplete_polls: this.#incompletePolls,
    };
  }
}
