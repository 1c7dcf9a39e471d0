import { BaseCommand } from '../../cli/base-command.js';
import { pairNetworkGuard } from '../../command-root.js';
import { setUpPairNetwork } from '../../app/pair/pair-network.js';
import {
  PAIRS_BRIDGE,
  PAIRS_CHAIN,
  PAIRS_NETWORK,
  type PairsNetworkReport,
} from '../../core/pair-network.js';

export default class NetworkSetup extends BaseCommand {
  static override summary = `Create the guarded pairs network (${PAIRS_NETWORK}) and our firewall rules, where missing.`;
  static override description = [
    `Pairs and sessions on network "bridge" join the engine network ${PAIRS_NETWORK} (bridge ${PAIRS_BRIDGE}, inter-container`,
    `traffic off). Our chain ${PAIRS_CHAIN} (iptables and ip6tables, jumped to from INPUT and DOCKER-USER for traffic from`,
    `${PAIRS_BRIDGE}) rejects new connections to the cloud metadata addresses (169.254.169.254, 169.254.170.2,`,
    "100.100.100.200, fd00:ec2::254), to every address of the host itself, and to another container's published port",
    'reached through a host address; replies of connections the host opened pass. The first pair or session on network',
    '"bridge" does the same setup: this command does it ahead of time. Idempotent. Runs iptables in this process\'s',
    "network namespace: run it as root on the engine's host. `network remove` undoes it.",
    '',
    'Exit codes: 0 set up and read back; 1 it could not be (no iptables, not root, a network of that name that is not',
    'ours or lets its containers reach each other); 2 ROBOGUIDE_PAIRS_NETWORK=engine-bridge; 3 no engine answers.',
  ].join('\n');
  static override examples = ['<%= config.bin %> network setup', '<%= config.bin %> network setup --json'];

  async run(): Promise<PairsNetworkReport & { ok: boolean }> {
    await this.parse(NetworkSetup);
    const { report, ok, detail } = await setUpPairNetwork(await pairNetworkGuard());
    this.log(detail);
    if (!ok) process.exitCode = 1;
    return { ...report, ok };
  }
}
