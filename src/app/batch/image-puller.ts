import {
  chooseEvictions,
  classifyPullFailure,
  INITIAL_EXPANSION,
  PULL_ATTEMPTS,
  PULL_BACKOFF_MS,
  registryHostOf,
  type PullFailureKind,
} from '../../core/image-plan.js';
import type { JournalFieldsOf } from '../../core/journal-events.js';
import type { PullProgress } from '../ports/image-pulls.js';
import type { ImagePullerDeps, ReadyOptions } from './image-puller-types.js';
import type { ImagePlanSnapshot, ImageReadiness } from './batch-images.js';

interface Held {
  bytes: number;
  lastUsedMs: number;
  readonly ownedByUser: boolean;
}

interface Pulling {
  readonly estimate: number;
  readonly layers: Map<string, { current: number; total: number }>;
}

/**
 * The supervisor's image plan at work (issue 43): pulls the images of the pairs next in dispatch order while pairs
 * run (at most `plan.concurrency` at once), keeps what the batch pulled within `plan.budget_bytes` (removing first
 * the least recently used image no pending pair needs, never one a running pair uses), and tells a pair whose turn
 * came whether its image is there (it waits, measured, never fails for a pull still under way). A pull is retried
 * with backoff; then an outage (`unavailable`) pauses the batch and a refusal fails the pairs that need the image.
 */
export class ImagePuller {
  readonly #deps: ImagePullerDeps;
  readonly #imageOf = new Map<string, string>();
  readonly #held = new Map<string, Held>();
  readonly #pulling = new Map<string, Pulling>();
  readonly #failed = new Map<string, { kind: PullFailureKind; message: string }>();
  /** Images handed to a pair and not given back yet (count per ref): never removed. */
  readonly #inUse = new Map<string, number>();
  /** Images the engine is removing now (bytes per ref): no longer handed to pairs, still on disk. */
  readonly #evicting = new Map<string, number>();
  /** The user's own images removed (--prune-own-images): they cannot be pulled back. */
  readonly #removedOwn = new Set<string>();
  readonly #waiters = new Set<() => void>();
  /** Images pairs whose turn came wait for (count per image): pulled first, and room is made for them. */
  readonly #waitingFor = new Map<string, number>();
  readonly #running = new Set<Promise<void>>();
  readonly #closing = new AbortController();
  #expansion = INITIAL_EXPANSION;
  #measured = false;
  /** The largest image pulled so far (the estimate of an image whose compressed size is unknown). */
  #largest = 0;
  #pumping = false;
  #again = false;
  #pulls = 0;
  #evictions = 0;
  #waits = 0;
  #waitedMs = 0;

  constructor(deps: ImagePullerDeps) {
    this.#deps = deps;
    for (const [image, planned] of Object.entries(deps.plan.images)) this.#imageOf.set(planned.ref, image);
  }

  /** What the engine holds of the plan already (a previous supervisor of this batch pulled it), then the first pulls. */
  async start(): Promise<void> {
    const now = this.#deps.clock.now().getTime();
    for (const ref of this.#imageOf.keys()) {
      const facts = await this.#deps.pulls.facts(ref).catch(() => null);
      if (facts !== null) this.#held.set(ref, { bytes: facts.bytes, lastUsedMs: now, ownedByUser: false });
    }
    if (this.#deps.plan.prune_own_images === true) {
      for (const [image, id] of Object.entries(this.#deps.ownImages ?? {})) {
        const facts = await this.#deps.pulls.facts(id).catch(() => null);
        if (facts === null) continue;
        this.#imageOf.set(id, image);
        this.#held.set(id, { bytes: facts.bytes, lastUsedMs: 0, ownedByUser: true });
      }
    }
    this.pump();
  }

  /**
   * A pair's turn came: resolves once its image is there (ready), its pull failed for good, or `stopping()` says the
   * batch stops. The wait is journalled (`waited_ms`). A ready image is held for the pair until `release`.
   */
  async ready(image: string, jobId: string, options: ReadyOptions = {}): Promise<ImageReadiness> {
    const halted = this.#deps.halted ?? ((): boolean => false);
    const stopping = (): boolean => halted() || options.signal?.aborted === true;
    const ref = this.#deps.plan.images[image]?.ref;
    if (ref === undefined) return this.#readyOwn(image, options.signal);
    const began = this.#deps.clock.now().getTime();
    let result: ImageReadiness;
    this.#waitingFor.set(image, (this.#waitingFor.get(image) ?? 0) + 1);
    for (;;) {
      const failed = this.#failed.get(ref);
      if (this.#held.has(ref)) {
        this.#inUse.set(ref, (this.#inUse.get(ref) ?? 0) + 1);
        result = { kind: 'ready' };
        break;
      }
      if (failed !== undefined) {
        result = { kind: failed.kind, message: failed.message };
        break;
      }
      if (stopping() || this.#closing.signal.aborted) {
        result = { kind: 'stopped' };
        break;
      }
      this.pump();
      await this.#changed(1_000, options.signal);
    }
    const left = (this.#waitingFor.get(image) ?? 1) - 1;
    if (left > 0) this.#waitingFor.set(image, left);
    else this.#waitingFor.delete(image);
    const waited = this.#deps.clock.now().getTime() - began;
    if (waited > 0 && options.quiet !== true) {
      this.#waits += 1;
      this.#waitedMs += waited;
      await this.#record({ action: 'waited', image, ref, job_id: jobId, waited_ms: waited });
    }
    return result;
  }

  /**
   * An image the engine had at start, held for the pair too. With --prune-own-images it may go (only once no pending
   * pair needs it): a removal under way is waited out, and an image gone cannot come back (it is not in the plan).
   */
  async #readyOwn(image: string, signal: AbortSignal | undefined): Promise<ImageReadiness> {
    const own = this.#deps.ownImages?.[image];
    if (own === undefined) return { kind: 'ready' };
    while (this.#evicting.has(own) && signal?.aborted !== true && !this.#closing.signal.aborted)
      await this.#changed(1_000, signal);
    if (this.#removedOwn.has(own))
      return {
        kind: 'failed',
        message: `${image} was removed (--prune-own-images) and is not in the image plan`,
      };
    this.#inUse.set(own, (this.#inUse.get(own) ?? 0) + 1);
    return { kind: 'ready' };
  }

  /** The images (as the manifest names them) this puller holds now, pulled by the batch. */
  heldImages(): string[] {
    return [...this.#held.entries()]
      .filter(([, h]) => !h.ownedByUser)
      .map(([ref]) => this.#imageOf.get(ref) ?? ref);
  }

  /** The pair of `image` ended: its image may go once no pending pair needs it. */
  release(image: string): void {
    const ref = this.#deps.plan.images[image]?.ref ?? this.#deps.ownImages?.[image];
    if (ref === undefined) return;
    const count = (this.#inUse.get(ref) ?? 1) - 1;
    if (count > 0) this.#inUse.set(ref, count);
    else this.#inUse.delete(ref);
    const held = this.#held.get(ref);
    if (held !== undefined) held.lastUsedMs = this.#deps.clock.now().getTime();
    this.pump();
  }

  /**
   * The supervisor leaves: no pull starts any more, the ones under way are abandoned (the engine stops them) and
   * waited for, and nothing is journalled after this resolves (the next supervisor journals its own).
   */
  async close(): Promise<void> {
    this.#closing.abort();
    this.#notify();
    await Promise.allSettled([...this.#running]);
  }

  snapshot(): ImagePlanSnapshot {
    return {
      budget_bytes: this.#deps.plan.budget_bytes,
      held_bytes: this.#usedBytes(),
      images: Object.keys(this.#deps.plan.images).length,
      present: [...this.#held.values()].filter((h) => !h.ownedByUser).length,
      pulling: [...this.#pulling.entries()].map(([ref, p]) => {
        let current = 0;
        let total = 0;
        for (const l of p.layers.values()) {
          current += l.current;
          total += l.total;
        }
        return { image: this.#imageOf.get(ref) ?? ref, current_bytes: current, total_bytes: total };
      }),
      pulls: this.#pulls,
      evictions: this.#evictions,
      failed: [...this.#failed.entries()].map(([ref, f]) => ({
        image: this.#imageOf.get(ref) ?? ref,
        kind: f.kind,
        message: f.message,
      })),
      waits: this.#waits,
      waited_ms: this.#waitedMs,
    };
  }

  /** Start the pulls the queue and the budget allow now (never waits for them). */
  pump(): void {
    if (this.#pumping) {
      this.#again = true;
      return;
    }
    this.#pumping = true;
    void this.#pumpOnce()
      .catch((err: unknown) =>
        this.#deps.logger.error({ err: this.#message(err) }, 'image pulls: pump failed'),
      )
      .finally(() => {
        this.#pumping = false;
        if (this.#again) {
          this.#again = false;
          this.pump();
        }
      });
  }

  async #pumpOnce(): Promise<void> {
    // Paused, stopping or leaving, or a registry is down (the batch is pausing): no pull starts.
    if (this.#closing.signal.aborted || this.#deps.halted?.() === true) return;
    if ([...this.#failed.values()].some((f) => f.kind === 'unavailable')) return;
    const waiting = [...this.#waitingFor.keys()];
    const order = [...new Set([...waiting, ...this.#deps.queue()])];
    for (const [position, image] of order.entries()) {
      if (this.#pulling.size >= this.#deps.plan.concurrency) return;
      const planned = this.#deps.plan.images[image];
      if (planned === undefined) continue;
      const ref = planned.ref;
      if (this.#held.has(ref) || this.#pulling.has(ref) || this.#failed.has(ref)) continue;
      const estimate = this.#estimate(planned.compressed_bytes);
      // Nothing measured and no size from the registry: one pull at a time until one is measured.
      if (estimate === 0 && this.#pulling.size > 0) return;
      if (!(await this.#makeRoom(estimate, order, position < Math.max(1, waiting.length)))) return;
      this.#startPull(image, ref, estimate);
    }
  }

  #estimate(compressed: number | null): number {
    if (compressed !== null) return Math.ceil(compressed * this.#expansion);
    return Math.max(this.#largest, ...[...this.#held.values()].map((h) => h.bytes));
  }

  #usedBytes(): number {
    let used = 0;
    for (const h of this.#held.values()) used += h.bytes;
    for (const p of this.#pulling.values()) used += p.estimate;
    for (const bytes of this.#evicting.values()) used += bytes; // still on disk until the engine says removed
    return used;
  }

  /** Remove what must go for `need` more bytes; false when it cannot fit yet (a pull or a pair must end first). */
  async #makeRoom(need: number, order: readonly string[], forHead: boolean): Promise<boolean> {
    const budget = this.#deps.plan.budget_bytes;
    const nextUse = new Map<string, number>();
    for (const [i, image] of order.entries()) {
      const ref = this.#deps.plan.images[image]?.ref ?? this.#deps.ownImages?.[image];
      if (ref !== undefined && !nextUse.has(ref)) nextUse.set(ref, i);
    }
    const held = [...this.#held.entries()].map(([ref, h]) => ({
      ref,
      bytes: h.bytes,
      lastUsedMs: h.lastUsedMs,
      nextUse: nextUse.get(ref) ?? null,
      inUse: this.#inUse.has(ref),
      ownedByUser: h.ownedByUser,
    }));
    const used = this.#usedBytes();
    // An image larger than the whole budget still runs: alone, once nothing else is held or pulling.
    if (used === 0 && need > budget) return forHead;
    const victims = chooseEvictions(held, used, need, budget, {
      forHead,
      pruneOwn: this.#deps.plan.prune_own_images === true,
    });
    if (victims === null) return false;
    for (const v of victims) {
      const held = this.#held.get(v.ref);
      if (held === undefined || this.#inUse.has(v.ref)) return false; // handed to a pair meanwhile
      // Out of `#held` before the engine is asked, not after: a pair whose turn comes while the engine removes it
      // must wait for the pull that brings it back, not be handed an image that is going ("No such image").
      this.#held.delete(v.ref);
      this.#evicting.set(v.ref, held.bytes);
      const removed = await this.#deps.pulls.remove(v.ref).catch(() => 'in_use' as const);
      this.#evicting.delete(v.ref);
      if (removed === 'in_use') {
        this.#held.set(v.ref, held); // a container still has it (a pair not yet settled): try later
        this.#notify();
        return false;
      }
      if (held.ownedByUser) this.#removedOwn.add(v.ref);
      this.#notify();
      this.#evictions += 1;
      await this.#record({
        action: 'evicted',
        image: this.#imageOf.get(v.ref) ?? v.ref,
        ref: v.ref,
        bytes: v.bytes,
      });
    }
    return true;
  }

  #startPull(image: string, ref: string, estimate: number): void {
    const pulling: Pulling = { estimate, layers: new Map() };
    this.#pulling.set(ref, pulling);
    const run = this.#pull(image, ref, pulling).finally(() => {
      this.#pulling.delete(ref);
      this.#running.delete(run);
      this.#notify();
      this.pump();
    });
    this.#running.add(run);
  }

  async #pull(image: string, ref: string, pulling: Pulling): Promise<void> {
    const auth = this.#deps.credentials.byHost.get(registryHostOf(image));
    const attempts = this.#deps.attempts ?? PULL_ATTEMPTS;
    await this.#record({ action: 'pull_started', image, ref });
    this.#deps.onChange?.();
    const onProgress = (p: PullProgress): void => {
      const total = p.progressDetail?.total;
      if (p.id !== undefined && p.status === 'Downloading' && typeof total === 'number')
        pulling.layers.set(p.id, { current: p.progressDetail?.current ?? 0, total });
    };
    let message = '';
    for (let attempt = 1; attempt <= attempts; attempt += 1) {
      try {
        await this.#deps.pulls.pull(ref, auth, onProgress, this.#closing.signal);
        const facts = await this.#deps.pulls.facts(ref);
        const bytes = facts?.bytes ?? pulling.estimate;
        this.#largest = Math.max(this.#largest, bytes);
        this.#learn(image, bytes);
        this.#held.set(ref, { bytes, lastUsedMs: this.#deps.clock.now().getTime(), ownedByUser: false });
        this.#pulls += 1;
        await this.#record({ action: 'pulled', image, ref, bytes });
        this.#deps.onChange?.();
        return;
      } catch (err) {
        message = this.#message(err);
        if (this.#closing.signal.aborted) return; // abandoned: the next supervisor pulls it again
        if (attempt < attempts) {
          await this.#record({ action: 'pull_retry', image, ref, attempt, message });
          await this.#deps.clock.sleep((this.#deps.backoffMs ?? PULL_BACKOFF_MS) * 2 ** (attempt - 1));
          if (this.#closing.signal.aborted) return;
        }
      }
    }
    const kind = classifyPullFailure(message);
    this.#failed.set(ref, { kind, message });
    await this.#record({ action: 'pull_failed', image, ref, kind, message, attempt: attempts });
    this.#deps.logger.warn({ image, kind, message }, 'image pull failed');
    this.#deps.onChange?.();
  }

  /** The store's bytes per compressed byte, as measured (the estimate of the next pulls). */
  #learn(image: string, bytes: number): void {
    const compressed = this.#deps.plan.images[image]?.compressed_bytes;
    if (compressed === null || compressed === undefined || compressed <= 0) return;
    const ratio = bytes / compressed;
    this.#expansion = this.#measured ? Math.max(this.#expansion, ratio) : Math.max(ratio, 1);
    this.#measured = true;
  }

  #message(err: unknown): string {
    return this.#deps.redact(err instanceof Error ? err.message : String(err)).slice(0, 500);
  }

  async #record(fields: JournalFieldsOf<'image'>): Promise<void> {
    if (this.#closing.signal.aborted) return;
    const node = this.#deps.node;
    await this.#deps
      .journal('image', node !== undefined ? { ...fields, node } : fields)
      .catch(() => undefined);
  }

  /** Until something changes (a pull ends, the puller closes) or `ms` passed. */
  async #changed(ms: number, also?: AbortSignal): Promise<void> {
    const woken = new AbortController();
    const wake = (): void => woken.abort();
    this.#waiters.add(wake);
    also?.addEventListener('abort', wake, { once: true });
    try {
      if (also?.aborted !== true) await this.#deps.clock.sleep(ms, woken.signal).catch(() => undefined);
    } finally {
      this.#waiters.delete(wake);
      also?.removeEventListener('abort', wake);
    }
  }

  #notify(): void {
    for (const w of [...this.#waiters]) w();
  }
}
