import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { EGRESS_FILE } from '../../core/evidence-names.js';
import { egressInputOf, networkOfEgress, type EgressPolicy } from '../../core/egress/policy.js';
import { tokenOfProxyUrl } from '../../core/egress/egress-network.js';
import { summarize, type EgressSummary } from '../../core/egress/record.js';
import { EgressLog, parseEgressLines } from '../egress-log.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import { EngineError } from '../ports/engine-error.js';
import type { Clock } from '../ports/clock.js';
import type { ContainerRuntime } from '../ports/container-runtime.js';
import type { EgressGate, EgressLease } from '../ports/egress.js';

/** Where a pair's records go: its evidence folder, masked with its texts' redactor. */
interface EgressTarget {
  readonly store: EvidenceStore;
  readonly jobRel: string;
  readonly redact: (text: string) => string;
}

/**
 * One pair's egress (docs/spec.md §5.6): for an allowlisted pair, `wrap(runtime)` opens its `egress.jsonl` and its
 * lease at the proxy before the create (its container then gets the proxy's variables, the egress network and the
 * gateway as its DNS); every attempt is appended to the file as it is reported; `finish` releases the lease and
 * reads the summary back from the file. A reattached pair (a supervisor restart) is registered again with the token
 * its container holds (`adopt`, `reattach`). A pair whose lease cannot be opened fails closed before its container
 * exists (engine_error), never falls back to an open network.
 */
export class PairEgress {
  readonly policy: EgressPolicy;
  /** Names the lease at the proxy; it is in the pair's environment, so its texts mask it like a secret. */
  #token = randomBytes(24).toString('hex');
  readonly #gate: EgressGate | undefined;
  #lease: EgressLease | null = null;
  #log: EgressLog | null = null;
  #target: EgressTarget | null = null;

  readonly #clock: Pick<Clock, 'setTimer'>;

  /** `egress`: the proxy (absent: an allowlisted pair fails closed); `clock`: the timer of its egress.jsonl writes. */
  constructor(
    deps: { readonly egress?: EgressGate; readonly clock: Pick<Clock, 'setTimer'> },
    policy: EgressPolicy,
  ) {
    this.#gate = deps.egress;
    this.#clock = deps.clock;
    this.policy = policy;
  }

  get allowlisted(): boolean {
    return this.policy.mode === 'allowlist';
  }

  get token(): string {
    return this.#token;
  }

  /**
   * A reattached pair: the token its container was given (read from the engine, never from disk), so that the
   * proxy knows it again. False when the container holds none (it then reaches nothing: fail closed).
   */
  async adopt(runtime: ContainerRuntime, containerId: string): Promise<boolean> {
    if (!this.allowlisted) return false;
    const env = await runtime.environmentOf(containerId).catch(() => null);
    const token = tokenOfProxyUrl(env?.['HTTP_PROXY']);
    if (token === null) return false;
    this.#token = token;
    return true;
  }

  /** Where the records go (before `wrap` or `reattach`: the redactor knows the token). */
  begin(store: EvidenceStore, jobRel: string, redact: (text: string) => string): void {
    this.#target = { store, jobRel, redact };
  }

  wrap(runtime: ContainerRuntime): ContainerRuntime {
    if (!this.allowlisted) return runtime;
    const create: ContainerRuntime['create'] = async (spec) => {
      const lease = await this.#open();
      const handle = await runtime.create({
        ...spec,
        env: { ...spec.env, ...lease.env },
        dns: lease.dns,
        macAddress: lease.mac,
        network: networkOfEgress(this.policy),
      });
      lease.attach(handle.id, true);
      return handle;
    };
    const start: ContainerRuntime['start'] = async (id) => {
      this.#lease?.starting();
      await runtime.start(id);
      this.#lease?.started();
    };
    return new Proxy(runtime, {
      get(target, prop) {
        if (prop === 'create') return create;
        if (prop === 'start') return start;
        const value: unknown = Reflect.get(target, prop, target);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
  }

  /** A reattached pair registered again at the proxy with its policy (frozen in the receipt) and its own token. */
  async reattach(containerId: string): Promise<void> {
    if (!this.allowlisted) return;
    const lease = await this.#open();
    lease.attach(containerId);
    lease.started();
  }

  async #open(): Promise<EgressLease> {
    if (this.#gate === undefined)
      throw new EngineError(
        'engine_error',
        'egress mode "allowlist" needs the egress proxy, which this executor does not have (swarm: not supported)',
        { statusCode: null, engineMessage: 'no egress proxy' },
      );
    try {
      const target = this.#target;
      if (target !== null && this.#log === null)
        this.#log = await EgressLog.open(target.store, target.jobRel, target.redact, this.#clock);
      const log = this.#log;
      this.#lease = await this.#gate.open(
        egressInputOf(this.policy),
        this.#token,
        log !== null ? (record) => log.append(record) : undefined,
      );
      return this.#lease;
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      throw new EngineError('engine_error', `the egress proxy could not take the pair: ${message}`, {
        statusCode: null,
        engineMessage: message,
        cause: err,
      });
    }
  }

  /**
   * The lease released, `egress.jsonl` closed (or written whole for a caller that gave no target), and the summary
   * for result.json read back from it; undefined when not allowlisted.
   */
  async finish(
    store: EvidenceStore,
    jobRel: string,
    redact: (text: string) => string,
  ): Promise<EgressSummary | undefined> {
    if (!this.allowlisted) return undefined;
    const lease = this.#lease;
    this.#lease = null;
    const closed = lease !== null ? await lease.close() : { records: [], dropped: 0 };
    const log = this.#log ?? (await EgressLog.open(store, jobRel, redact, this.#clock));
    this.#log = null;
    for (const record of closed.records) log.append(record);
    await log.close();
    const text = await store.readBytes(join(jobRel, EGRESS_FILE));
    const records = parseEgressLines(text === null ? '' : Buffer.from(text).toString('utf8'));
    return summarize('allowlist', records, closed.dropped + log.dropped);
  }
}
