import type { EgressInput } from '../../core/egress/policy.js';
import type { EgressRecord } from '../../core/egress/record.js';

/**
 * The egress proxy as the pair lifecycle sees it (docs/spec.md §5.6): a lease per allowlisted pair or session,
 * registered with the proxy before its container exists.
 */
export interface EgressGate {
  /**
   * `token` names the lease at the proxy (made by the caller, so that its texts mask it from the start; a reattached
   * pair's is the one its container holds). With `onRecord`, every record goes there as it arrives (the caller
   * appends it to `egress.jsonl` at once) and the lease keeps none; without, the lease keeps them (`snapshot`).
   */
  open(policy: EgressInput, token: string, onRecord?: (record: EgressRecord) => void): Promise<EgressLease>;
}

export interface EgressLease {
  /** HTTP_PROXY and friends, with this lease's token: the container's environment (never persisted). */
  readonly env: Readonly<Record<string, string>>;
  /** The container's DNS servers (the gateway: whatever asks it is recorded and refused). */
  readonly dns: readonly string[];
  /** The token: masked wherever the pair's texts are (it is in the proxy URL). */
  readonly token: string;
  /**
   * The link-layer address its container is created with (`ContainerBase.macAddress`): made for this lease, so the
   * packets that bypassed the proxy are known as its container's even after the engine gave its IPv4 address to another.
   */
  readonly mac: string;
  /**
   * The container now holding the lease (its addresses name the packets that bypassed the proxy). `created`: it was
   * created with `mac` (absent: not, as a reattached container or an adopted session: its addresses are learned).
   */
  attach(containerId: string, created?: boolean): void;
  /**
   * Its container is about to get its address (its start, or its move to the network, is asked now): a packet from
   * that address before this moment was another container's (the engine gives a freed address to the next at once).
   */
  starting(): void;
  /**
   * Its container runs now (started, reattached, or moved to the network again): its address is asked at once and
   * kept for the lease, so that a packet it sent past the proxy is still known after the container is gone. Without
   * `starting` before it (a reattach, an adopted session), it had the address before this lease knew it.
   */
  started(): void;
  /** A new policy for new connections (a live session's phase); effective once this resolves. */
  setPolicy(policy: EgressInput): Promise<void>;
  /** Every record so far (a copy); `dropped` past the cap. */
  snapshot(): { readonly records: readonly EgressRecord[]; readonly dropped: number };
  /** Released at the proxy; the records of the lease's life. */
  close(): Promise<{ readonly records: readonly EgressRecord[]; readonly dropped: number }>;
}
