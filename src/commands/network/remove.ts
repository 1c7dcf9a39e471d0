import { BaseCommand } from '../../cli/base-command.js';
import { pairNetworkGuard } from '../../command-root.js';
import { removePairNetwork } from '../../app/pair/pair-network.js';
import { PAIRS_CHAIN, PAIRS_NETWORK } from '../../core/pair-network.js';

export default class NetworkRemove extends BaseCommand {
  static override summary = `Remove the guarded pairs network (${PAIRS_NETWORK}) and our firewall rules (${PAIRS_CHAIN}).`;
  static override description = [
    `The network first: the engine refuses while a container is on it, and then nothing is removed (exit 1), so a`,
    `running pair never loses its rules. Then the jumps from INPUT and DOCKER-USER and the chain ${PAIRS_CHAIN}, in iptables`,
    'and ip6tables. A network of that name that is not ours (no label roboguide.network=pairs) is left alone. Idempotent:',
    'what is absent is not an error. The next pair or session on network "bridge" sets everything up again.',
    '',
    'Exit codes: 0 removed (or absent); 1 in use, not ours, or iptables failed; 2 ROBOGUIDE_PAIRS_NETWORK=engine-bridge;',
    '3 no engine answers.',
  ].join('\n');
  static override examples = ['<%= config.bin %> network remove', '<%= config.bin %> network remove --json'];

  async run(): Promise<{ network: 'removed' | 'absent'; rules: 'removed' | 'absent' }> {
    await this.parse(NetworkRemove);
    const { removed } = await removePairNetwork(await pairNetworkGuard());
    this.log(`network ${PAIRS_NETWORK}: ${removed.network}; rules of ${PAIRS_CHAIN}: ${removed.rules}`);
    return removed;
  }
}
