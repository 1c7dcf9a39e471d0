import type { PairsNetworkReport } from '../../core/pair-network.js';

/**
 * The guarded bridge network of our pairs and the firewall rules of ours around it (src/core/pair-network.ts). The
 * adapter talks to the engine (the network) and to iptables/ip6tables in the engine's network namespace (the rules).
 */
export interface PairNetworkGuard {
  /**
   * Creates what is missing (the network, the chain, its rules, the jumps) and leaves what is in place; idempotent and
   * safe to race. Throws (never half-guards silently) when the network cannot be created or the rules cannot be set:
   * an existing network of that name that is not ours or not ICC-off, no iptables, an engine without its own rules.
   */
  ensure(): Promise<void>;
  /**
   * Begins now the rules' listing (and what it finds missing, made) that the process's first `ensure` would begin,
   * for that `ensure` to take (issue 39: a `pair run` lists beside its checks, not before its create). Does nothing
   * once a listing was taken; never fails (a failed listing is that `ensure`'s to report).
   */
  prepare?(): void;
  /** What is in place now; changes nothing. */
  check(): Promise<PairsNetworkReport>;
  /**
   * Removes the network (refused by the engine while a container is on it: the rules then stay) and then the jumps
   * and the chain. Idempotent: what is absent is not an error.
   */
  remove(): Promise<{ readonly network: 'removed' | 'absent'; readonly rules: 'removed' | 'absent' }>;
}
