import type Docker from 'dockerode';
import { RoboguideError } from '../../core/errors.js';
import {
  EGRESS_NETWORK,
  EGRESS_NETWORK_LABELS,
  EGRESS_NETWORK_OPTIONS,
  chainMatches,
  egressChains,
  egressJumpRule,
  type ChainPlan,
  type EgressPorts,
} from '../../core/egress/egress-network.js';
import { statusOf, toEngineError } from '../docker/engine-error.js';
import { iptablesRunner, rulesetWatchFor, type IptablesRunner } from '../docker/docker-pair-network.js';
import type { RulesetWatch } from '../docker/ruleset-watch.js';

const CALL_TIMEOUT_MS = 60_000;

/**
 * The egress network on the engine and our chains for it (src/core/egress/egress-network.ts): created or rewritten
 * where missing or different, checked on every allowlisted create, before the container exists. Our own chains
 * only: the pairs network's chain (ROBOGUIDE-PAIRS) is never read nor edited here.
 */
export class DockerEgressNetwork {
  readonly #docker: Docker;
  readonly #iptables: IptablesRunner;
  readonly #ports: EgressPorts;
  readonly #watch: RulesetWatch | null;
  /** The watch's mark taken before the last listing that found every rule in place, and for which gateway. */
  #verified: { mark: number; gateway: string } | null = null;
  #listings = 0;

  /**
   * `watch`: the kernel's change feed that spares the listing while the ruleset is unchanged (issue 39's, as the
   * pairs network's guard uses it). By default, with the default runner, the one of this process's namespace; with a
   * runner of the caller's, none unless given.
   */
  constructor(docker: Docker, ports: EgressPorts, iptables?: IptablesRunner, watch?: RulesetWatch | null) {
    this.#docker = docker;
    this.#ports = ports;
    this.#iptables = iptables ?? iptablesRunner();
    this.#watch =
      watch !== undefined ? watch : iptables === undefined ? rulesetWatchFor([], this.#iptables) : null;
  }

  get ports(): EgressPorts {
    return this.#ports;
  }

  /** The network and the rules in place; returns the network's gateway (the proxy's address). */
  async ensure(): Promise<string> {
    const gateway = await this.#ensureNetwork();
    // Every rule was in place at a mark, for this gateway, and the kernel has reported no change of the ruleset since
    // (no rule removed, no chain flushed, no jump deleted, by anyone, an engine restart included): nothing to list.
    const verified = this.#verified;
    if (
      verified !== null &&
      verified.gateway === gateway &&
      this.#watch !== null &&
      (await this.#watch.unchangedSince(verified.mark))
    )
      return gateway;
    this.#verified = null;
    // Taken before the listing: a change made while it runs is seen at the next open. Not on a process's first.
    this.#listings += 1;
    const mark = this.#watch === null || this.#listings < 2 ? null : await this.#watch.mark();
    for (const plan of egressChains(gateway, this.#ports)) await this.#ensureChain(plan);
    this.#verified = mark === null ? null : { mark, gateway };
    return gateway;
  }

  async #inspect(): Promise<{
    labels: Record<string, string>;
    options: Record<string, string>;
    gateway: string | null;
  } | null> {
    try {
      const info = (await this.#docker.getNetwork(EGRESS_NETWORK).inspect()) as {
        Name?: string;
        Labels?: Record<string, string> | null;
        Options?: Record<string, string> | null;
        IPAM?: { Config?: { Gateway?: string; Subnet?: string }[] | null };
      };
      if (info.Name !== EGRESS_NETWORK) return null;
      const config = info.IPAM?.Config?.[0];
      return {
        labels: info.Labels ?? {},
        options: info.Options ?? {},
        gateway: config?.Gateway ?? firstAddressOf(config?.Subnet),
      };
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw toEngineError(err, 'inspect a network', EGRESS_NETWORK);
    }
  }

  async #ensureNetwork(): Promise<string> {
    let facts = await this.#inspect();
    if (facts === null) {
      try {
        await this.#docker.createNetwork({
          Name: EGRESS_NETWORK,
          Driver: 'bridge',
          CheckDuplicate: true,
          Internal: false,
          Attachable: false,
          Labels: { ...EGRESS_NETWORK_LABELS },
          Options: { ...EGRESS_NETWORK_OPTIONS },
          abortSignal: AbortSignal.timeout(CALL_TIMEOUT_MS),
        });
      } catch (err) {
        // Another process created it meanwhile (409, or 403 "networks have same bridge name" when both passed the
        // engine's name check): it is there now, and checked below like any existing one.
        if (statusOf(err) !== 409 && (await this.#inspect()) === null)
          throw toEngineError(err, 'create a network', EGRESS_NETWORK);
      }
      facts = await this.#inspect();
    }
    const problem =
      facts === null
        ? 'was created but the engine does not show it'
        : Object.entries(EGRESS_NETWORK_LABELS).some(([k, v]) => facts?.labels[k] !== v)
          ? 'exists but is not ours (no label roboguide.network=egress)'
          : Object.entries(EGRESS_NETWORK_OPTIONS).some(([k, v]) => facts?.options[k] !== v)
            ? 'exists with other bridge options (name, ICC)'
            : facts.gateway === null
              ? 'has no IPv4 gateway'
              : null;
    if (problem !== null || facts === null || facts.gateway === null)
      throw new RoboguideError(
        'E_NETWORK',
        `network ${EGRESS_NETWORK} ${problem ?? ''}: allowlisted pairs are not started`,
      );
    return facts.gateway;
  }

  async #run(plan: ChainPlan, args: readonly string[]) {
    return this.#iptables(plan.family, ['-t', plan.table, ...args]);
  }

  async #must(plan: ChainPlan, args: readonly string[], what: string): Promise<void> {
    const result = await this.#run(plan, args);
    if (result.code !== 0)
      throw new RoboguideError(
        'E_NETWORK',
        `${plan.family === 'ipv4' ? 'iptables' : 'ip6tables'} could not ${what} (${plan.table}): ${result.stderr.trim() || `exit ${result.code}`}; allowlisted pairs need root`,
      );
  }

  async #ensureChain(plan: ChainPlan): Promise<void> {
    const listing = await this.#run(plan, ['-S', plan.chain]);
    if (listing.code !== 0) {
      const created = await this.#run(plan, ['-N', plan.chain]);
      if (created.code !== 0 && (await this.#run(plan, ['-S', plan.chain])).code !== 0)
        await this.#must(plan, ['-N', plan.chain], `create chain ${plan.chain}`);
    }
    const now = await this.#run(plan, ['-S', plan.chain]);
    if (!chainMatches(plan, now.stdout)) {
      await this.#must(plan, ['-F', plan.chain], `flush chain ${plan.chain}`);
      for (const rule of plan.rules)
        await this.#must(plan, ['-A', plan.chain, ...rule], `add a rule to ${plan.chain}`);
    }
    for (const from of plan.jumpsFrom) {
      if ((await this.#run(plan, ['-C', from, ...egressJumpRule(plan.chain)])).code === 0) continue;
      await this.#must(
        plan,
        ['-I', from, '1', ...egressJumpRule(plan.chain)],
        `insert the jump from ${from} to ${plan.chain}`,
      );
    }
  }
}

function firstAddressOf(subnet: string | undefined): string | null {
  const match = /^(\d+)\.(\d+)\.(\d+)\.(\d+)\/\d+$/.exec(subnet ?? '');
  if (match === null) return null;
  return `${match[1]}.${match[2]}.${match[3]}.${Number(match[4]) + 1}`;
}
