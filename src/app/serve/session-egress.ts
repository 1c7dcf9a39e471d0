import { randomBytes } from 'node:crypto';
import {
  egressInputOf,
  networkOfEgress,
  parseEgress,
  type EgressInput,
  type EgressPolicy,
} from '../../core/egress/policy.js';
import type { NetworkChoice } from '../../core/pair-network.js';
import { redactText } from '../../core/redaction/redact-text.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import { egressLines } from '../egress-log.js';
import { canMoveNetworks } from '../ports/runtime-capabilities.js';
import type { EgressGate, EgressLease } from '../ports/egress.js';
import { ApiError } from './api-error.js';

const NONE: EgressPolicy = { mode: 'none', allow: [], methods: null };
/** The proxy's variables, emptied: what an exec gets once its session has left the allowlist (curl, Python, Go skip ""). */
const PROXY_VARIABLES = ['HTTP_PROXY', 'HTTPS_PROXY', 'http_proxy', 'https_proxy', 'ALL_PROXY'];

/**
 * A session's egress policy (docs/spec.md §5.6, "Sessions"): the network its container is on, its lease at the proxy
 * while it is allowlisted, and the switch of a live session (`PUT /v1/sessions/{id}/egress`).
 *
 * A switch that changes the network is made closed first: the lease is told "none" (the proxy refuses everything
 * and closes the lease's tunnels), the container leaves every network (loopback only), and only then is the new
 * network joined and the new policy registered. A step that fails leaves the session with mode "none" (and says
 * so): never wider than asked. A switch within the allowlist only changes the lease's policy; the proxy closes the
 * tunnels opened under the old one. Either way the new policy holds for every connection made after the answer.
 */
export class SessionEgress {
  policy: EgressPolicy;
  /** Names the session's lease at the proxy; a secret of the session (its texts mask it). */
  readonly token = randomBytes(24).toString('hex');
  readonly #gate: EgressGate | undefined;
  #lease: EgressLease | null = null;
  #switching: Promise<unknown> = Promise.resolve();

  /** Adds to the session's secrets: the token joins them when the lease is opened (it is then in the execs' environment). */
  readonly #addSecret: (secret: string) => Promise<void>;

  constructor(
    gate: EgressGate | undefined,
    policy: EgressPolicy,
    addSecret: (secret: string) => Promise<void> = () => Promise.resolve(),
  ) {
    this.#gate = gate;
    this.policy = policy;
    this.#addSecret = addSecret;
  }

  get input(): EgressInput {
    return egressInputOf(this.policy);
  }

  /** The container's network, and for an allowlisted start the proxy's variables and its DNS (the gateway). */
  async forCreate(): Promise<{
    network: NetworkChoice;
    env: Record<string, string>;
    dns?: string[];
    macAddress?: string;
  }> {
    if (this.policy.mode !== 'allowlist') return { network: networkOfEgress(this.policy), env: {} };
    const lease = await this.#leaseFor(this.policy);
    return { network: 'allowlist', env: { ...lease.env }, dns: [...lease.dns], macAddress: lease.mac };
  }

  /** Its container is about to be started (or moved to the egress network): `attached` follows once it is. */
  starting(): void {
    this.#lease?.starting();
  }

  /**
   * Its container, created (`created`: with the lease's `mac`, `forCreate`'s) and started, or moved to the egress
   * network; without `starting`: running before.
   */
  attached(containerId: string, created = false): void {
    this.#lease?.attach(containerId, created);
    this.#lease?.started();
  }

  /** What each exec adds to its environment: the proxy while allowlisted, emptied proxy variables after. */
  execEnv(): Record<string, string> {
    if (this.#lease === null) return {};
    if (this.policy.mode === 'allowlist') return { ...this.#lease.env };
    return Object.fromEntries(PROXY_VARIABLES.map((name) => [name, '']));
  }

  /** The switch of a live session, one at a time per session; resolves once the new policy holds. */
  set(engine: object, containerId: string, input: EgressInput): Promise<EgressInput> {
    const parsed = parseEgress(input);
    if (!parsed.ok)
      return Promise.reject(
        ApiError.invalid('the egress policy', [{ path: parsed.field, rule: parsed.rule }]),
      );
    const run = this.#switching.then(() => this.#switch(engine, containerId, parsed.policy));
    this.#switching = run.catch(() => undefined);
    return run;
  }

  async #switch(engine: object, containerId: string, next: EgressPolicy): Promise<EgressInput> {
    if (next.mode === 'allowlist' && this.#gate === undefined) throw unavailable();
    if (this.policy.mode === 'allowlist' && next.mode === 'allowlist') {
      const adopted = this.#lease === null;
      await this.#leaseFor(next); // an adopted session gets its lease here (its proxy variables: each exec's)
      if (adopted) this.attached(containerId); // running before: its address asked now
      this.policy = next;
      return this.input;
    }
    if (networkOfEgress(this.policy) === networkOfEgress(next)) {
      this.policy = next; // none → none, open → open
      return this.input;
    }
    if (!canMoveNetworks(engine))
      throw new ApiError(409, 'E_EGRESS_UNAVAILABLE', 'this engine cannot move a session between networks');
    // Closed first: the lease refuses everything, then the container leaves its network (loopback only).
    if (this.#lease !== null) await this.#lease.setPolicy({ mode: 'none' });
    await engine.moveNetwork(containerId, 'none');
    this.policy = NONE;
    try {
      if (next.mode === 'allowlist') await this.#leaseFor(next);
      if (next.mode === 'allowlist') this.starting();
      await engine.moveNetwork(containerId, networkOfEgress(next));
      if (next.mode === 'allowlist') this.attached(containerId);
    } catch (err) {
      await engine.moveNetwork(containerId, 'none').catch(() => undefined);
      if (this.#lease !== null) await this.#lease.setPolicy({ mode: 'none' }).catch(() => undefined);
      const message = err instanceof Error ? err.message : String(err);
      throw new ApiError(
        503,
        'E_EGRESS_SWITCH_FAILED',
        `the session could not join the network of mode "${next.mode}" (${message}); it is left with mode "none" (no network)`,
      );
    }
    this.policy = next;
    return this.input;
  }

  async #leaseFor(policy: EgressPolicy): Promise<EgressLease> {
    if (this.#gate === undefined) throw unavailable();
    if (this.#lease !== null) {
      await this.#lease.setPolicy(egressInputOf(policy));
      return this.#lease;
    }
    await this.#addSecret(this.token);
    try {
      this.#lease = await this.#gate.open(egressInputOf(policy), this.token);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      throw new ApiError(
        503,
        'E_EGRESS_UNAVAILABLE',
        `the egress proxy could not take the session: ${message}`,
      );
    }
    return this.#lease;
  }

  /** Once the container is gone: the lease released and `egress.jsonl` written (masked); nothing when never allowlisted. */
  async finish(store: EvidenceStore, rel: string, secrets: readonly string[]): Promise<void> {
    const lease = this.#lease;
    if (lease === null) return;
    this.#lease = null;
    const { records } = await lease.close();
    await store.writeBytesAtomic(rel, Buffer.from(egressLines(records, (text) => redactText(text, secrets))));
  }
}

function unavailable(): ApiError {
  return new ApiError(
    409,
    'E_EGRESS_UNAVAILABLE',
    'egress mode "allowlist" needs the egress proxy, which this server does not have (it runs only on the local engine with the guarded pairs network, as root)',
    [{ path: 'egress.mode', rule: 'allowlist is not available on this server' }],
  );
}
