import { describePairsNetwork, type PairsNetworkReport } from '../../core/pair-network.js';
import type { PairNetworkGuard } from '../ports/pair-network.js';

/** `network setup`: what is missing is created, then what is in place is read back (never trusted from the setup alone). */
export async function setUpPairNetwork(
  guard: PairNetworkGuard,
): Promise<{ readonly report: PairsNetworkReport; readonly ok: boolean; readonly detail: string }> {
  await guard.ensure();
  const report = await guard.check();
  return { report, ...describePairsNetwork(report) };
}

/** `network remove`: the network (refused while a container is on it, the rules then kept), then our rules; read back. */
export async function removePairNetwork(guard: PairNetworkGuard): Promise<{
  readonly removed: { readonly network: 'removed' | 'absent'; readonly rules: 'removed' | 'absent' };
  readonly report: PairsNetworkReport;
}> {
  const removed = await guard.remove();
  return { removed, report: await guard.check() };
}
