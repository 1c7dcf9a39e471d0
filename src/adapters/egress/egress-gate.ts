import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type Docker from 'dockerode';
import type { EgressGate, EgressLease } from '../../app/ports/egress.js';
import { DEFAULT_PROXY_PORT, DEFAULT_SINK_PORT, EGRESS_NETWORK } from '../../core/egress/egress-network.js';
import type { EgressInput } from '../../core/egress/policy.js';
import type { EgressRecord } from '../../core/egress/record.js';
import type { IptablesRunner } from '../docker/docker-pair-network.js';
import type { RulesetWatch } from '../docker/ruleset-watch.js';
import { DockerEgressNetwork } from './docker-egress-network.js';
import { EgressBroker } from './egress-broker.js';

/** Where the proxy's control socket and log live on this host (root's runtime folder; one proxy per host). */
export const EGRESS_STATE_DIR = '/run/roboguide-eval';

/** The proxy's program: the built one next to this module, or dist's when running from the sources (tests). */
export function proxyMainPath(): string {
  const here = fileURLToPath(new URL('./proxy-main.js', import.meta.url));
  if (existsSync(here)) return here;
  return fileURLToPath(new URL('../../../dist/adapters/egress/proxy-main.js', import.meta.url));
}

export interface EgressGateOptions {
  readonly stateDir?: string;
  /** A prefix for the proxy's process and the rules (`nsenter --net=…`: the engine's namespace). */
  readonly iptables?: IptablesRunner;
  readonly commandPrefix?: readonly string[];
  readonly dns?: readonly string[];
  readonly ports?: { readonly proxy: number; readonly sink: number };
  /** The ruleset's change feed in the rules' namespace (default: this process's, with the default runner). */
  readonly watch?: RulesetWatch | null;
}

/** The egress proxy of the local engine: one broker per process, made on the first allowlisted pair. */
export function createEgressGate(
  docker: Docker,
  options: EgressGateOptions = {},
): EgressGate & { readonly broker: () => EgressBroker } {
  let broker: EgressBroker | null = null;
  const make = (): EgressBroker => {
    const stateDir = options.stateDir ?? EGRESS_STATE_DIR;
    const network = new DockerEgressNetwork(
      docker,
      options.ports ?? { proxy: DEFAULT_PROXY_PORT, sink: DEFAULT_SINK_PORT },
      options.iptables,
      options.watch,
    );
    return new EgressBroker({
      network,
      controlPath: `${stateDir}/egress.sock`,
      logPath: `${stateDir}/egress-proxy.log`,
      command: [...(options.commandPrefix ?? []), process.execPath, proxyMainPath()],
      ...(options.dns !== undefined ? { dns: options.dns } : {}),
      linkOf: async (id) => {
        const info = (await docker.getContainer(id).inspect()) as {
          NetworkSettings?: { Networks?: Record<string, { IPAddress?: string; MacAddress?: string }> };
        };
        const endpoint = info.NetworkSettings?.Networks?.[EGRESS_NETWORK];
        return { address: endpoint?.IPAddress || null, mac: endpoint?.MacAddress || null };
      },
    });
  };
  return {
    broker: () => (broker ??= make()),
    open: (
      policy: EgressInput,
      token: string,
      onRecord?: (record: EgressRecord) => void,
    ): Promise<EgressLease> => (broker ??= make()).open(policy, token, onRecord),
  };
}
