import { describePairsNetwork, PAIRS_NETWORK, PAIRS_NETWORK_VARIABLE } from '../../core/pair-network.js';
import type { PairNetworkGuard } from '../ports/pair-network.js';
import { fail, ok, warn, type DoctorCheck } from './check.js';

const NAME = 'pairs network';
const setupFix = (bin: string): string =>
  `${bin} network setup (the first pair on network "bridge" also sets it up)`;

/**
 * The guarded pairs network and our firewall rules (docs/spec.md §5.1): ok when the network is ours with ICC off and
 * every rule and jump is in place; warn when nothing is set up yet (the first pair does it) or the guard is turned
 * off; fail when the network is not ours or not guarded, or exists while rules are missing (a pair on it now is
 * unguarded), or when iptables cannot be read.
 */
export async function pairNetworkCheck(
  guard: PairNetworkGuard | 'engine-bridge',
  bin = 'roboguide-eval',
): Promise<DoctorCheck> {
  const SETUP_FIX = setupFix(bin);
  if (guard === 'engine-bridge') {
    return warn(
      NAME,
      `${PAIRS_NETWORK_VARIABLE}=engine-bridge: pairs on network "bridge" join the engine's default bridge network, unguarded (other containers, the cloud metadata address and the host's addresses are reachable)`,
      `unset ${PAIRS_NETWORK_VARIABLE} to use the guarded network ${PAIRS_NETWORK}`,
    );
  }
  let report;
  try {
    report = await guard.check();
  } catch (err) {
    return fail(
      NAME,
      `cannot be checked: ${err instanceof Error ? err.message : String(err)}`,
      'run as root with iptables installed (Debian: apt-get install iptables), or run the pairs with network "none"',
    );
  }
  const { ok: guarded, detail } = describePairsNetwork(report);
  if (guarded) return ok(NAME, detail);
  if (report.network.state === 'foreign')
    return fail(
      NAME,
      detail,
      `remove that network once no container uses it (docker network rm ${PAIRS_NETWORK}); the next pair creates ours`,
    );
  if (report.network.state === 'ok')
    return fail(NAME, `${detail}: a pair on it now is not guarded`, SETUP_FIX);
  return warn(NAME, detail, SETUP_FIX);
}
