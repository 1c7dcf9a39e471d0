import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { EGRESS_FILE } from '../core/evidence-names.js';
import { egressInputOf, networkOfEgress, type EgressPolicy } from '../core/egress/policy.js';
import { summarize, type EgressRecord, type EgressSummary } from '../core/egress/record.js';
import type { EvidenceStore } from './evidence/evidence-store.js';
import { EngineError } from './ports/engine-error.js';
import type { ContainerRuntime } from './ports/container-runtime.js';
import type { EgressGate, EgressLease } from './ports/egress.js';

/**
 * One pair's egress (docs/spec.md §5.6): for an allowlisted pair, `wrap(runtime)` opens its lease at the proxy before
 * the create (its container then gets the proxy's variables, the egress network and the gateway as its DNS) and
 * `finish` writes `egress.jsonl` (every attempt, masked) once the container is gone. A pair whose lease cannot be
 * opened fails closed before its container exists (engine_error), never falls back to an open network.
 */
export class PairEgress {
  readonly policy: EgressPolicy;
  /** Names the lease at the proxy; it is in the pair's environment, so its texts mask it like a secret. */
  readonly token = randomBytes(24).toString('hex');
  readonly #gate: EgressGate | undefined;
  #lease: EgressLease | null = null;

  constructor(gate: EgressGate | undefined, policy: EgressPolicy) {
    this.#gate = gate;
    this.policy = policy;
  }

  get allowlisted(): boolean {
    return this.policy.mode === 'allowlist';
  }

  wrap(runtime: ContainerRuntime): ContainerRuntime {
    if (!this.allowlisted) return runtime;
    const create: ContainerRuntime['create'] = async (spec) => {
      const lease = await this.#open();
      const handle = await runtime.create({
        ...spec,
        env: { ...spec.env, ...lease.env },
        dns: lease.dns,
        network: networkOfEgress(this.policy),
      });
      lease.attach(handle.id);
      return handle;
    };
    return new Proxy(runtime, {
      get(target, prop) {
        if (prop === 'create') return create;
        const value: unknown = Reflect.get(target, prop, target);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
  }

  async #open(): Promise<EgressLease> {
    if (this.#gate === undefined)
      throw new EngineError(
        'engine_error',
        'egress mode "allowlist" needs the egress proxy, which this executor does not have (swarm: not supported)',
        { statusCode: null, engineMessage: 'no egress proxy' },
      );
    try {
      this.#lease = await this.#gate.open(egressInputOf(this.policy), this.token);
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

  /** The lease released, `egress.jsonl` written (masked), the summary for result.json; undefined when not allowlisted. */
  async finish(
    store: EvidenceStore,
    jobRel: string,
    redact: (text: string) => string,
  ): Promise<EgressSummary | undefined> {
    if (!this.allowlisted) return undefined;
    const lease = this.#lease;
    this.#lease = null;
    const { records, dropped } = lease !== null ? await lease.close() : { records: [], dropped: 0 };
    await store.writeBytesAtomic(join(jobRel, EGRESS_FILE), Buffer.from(egressLines(records, redact)));
    return summarize(
      'allowlist',
      records.map((r) => maskRecord(r, redact)),
      dropped,
    );
  }
}

/** One JSON line per record, every text masked (a URL or a DNS name can carry a secret). */
export function egressLines(records: readonly EgressRecord[], redact: (text: string) => string): string {
  return records.map((r) => `${JSON.stringify(maskRecord(r, redact))}\n`).join('');
}

function maskRecord(record: EgressRecord, redact: (text: string) => string): EgressRecord {
  return {
    ...record,
    host: record.host === null ? null : redact(record.host),
    ...(record.target !== undefined ? { target: redact(record.target) } : {}),
    ...(record.sni !== undefined && record.sni !== null ? { sni: redact(record.sni) } : {}),
  };
}
