import type { InfoBody, VersionBody } from './engine-probe.js';

/**
 * How long one answer of `info` + `version` serves later calls: the facts read from them (engine id, data root,
 * runtimes, security options, API version) change only when the engine is reconfigured and restarted, and a restart
 * takes longer than this; a call made after it asks again.
 */
export const ENGINE_FACTS_REUSE_MS = 5_000;

/**
 * The engine's `info` and `version`, asked once for the calls that come within `reuseMs` of one another (a command's
 * start-up asks for them from several places: the mount rules, the outcome folder's owner, the seccomp option, the
 * runtime check — two to four round trips each process paid before; issue 39). Calls made while an answer is on its
 * way share it. A failed answer is never kept: the next call asks again.
 */
export class EngineFactsCache<V extends VersionBody = VersionBody> {
  readonly #ask: () => Promise<[InfoBody, V]>;
  readonly #now: () => number;
  readonly #reuseMs: number;
  #last: { readonly atMs: number; readonly answer: Promise<[InfoBody, V]> } | null = null;

  /** `now`: milliseconds of a monotonic clock (default performance.now). */
  constructor(
    ask: () => Promise<[InfoBody, V]>,
    options: { readonly now?: () => number; readonly reuseMs?: number } = {},
  ) {
    this.#ask = ask;
    this.#now = options.now ?? (() => performance.now());
    this.#reuseMs = options.reuseMs ?? ENGINE_FACTS_REUSE_MS;
  }

  get(): Promise<[InfoBody, V]> {
    const now = this.#now();
    if (this.#last !== null && now - this.#last.atMs < this.#reuseMs) return this.#last.answer;
    const last = { atMs: now, answer: this.#ask() };
    this.#last = last;
    last.answer.catch(() => {
      if (this.#last === last) this.#last = null;
    });
    return last.answer;
  }
}
