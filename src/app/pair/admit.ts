// Admission for one claimed pair: one request, one refusal type; what a refusal means is the plan's policy.
import type { AdmitRefusal } from '../../core/admission-rule.js';
import { pinnedPlacement } from '../../core/admission-rule.js';
import { RoboguideError } from '../../core/errors.js';
import { admitOnNodes } from '../admission.js';
import type { PairJob } from './execute-pair-types.js';
import type { CapacityRegistry } from '../ports/capacity-registry.js';
import type { PairPlan } from './claimed-pair-types.js';

export type Admitted =
  | { readonly kind: 'refused'; readonly admitted: AdmitRefusal }
  | { readonly kind: 'reserved'; readonly reservationId: string; readonly job: PairJob };

/**
 * A slot in the registry (per node on a swarm: the first of the plan's nodes with room), the job pinned to the node
 * its slot is on. A refusal is returned (`wait`: the supervisor dispatches later) or thrown (`throw`: `pair run`).
 */
export async function admitClaimed(registry: CapacityRegistry, plan: PairPlan): Promise<Admitted> {
  const { admitted, node } = await admitOnNodes(registry, plan.admission.request, plan.admission.nodes);
  if (admitted.kind === 'refused') {
    if (plan.onAdmitRefused === 'throw') throw admissionRefused(admitted, plan.job.cwd);
    return { kind: 'refused', admitted };
  }
  const job =
    node === null ? plan.job : { ...plan.job, placement: pinnedPlacement(plan.job.placement, node) };
  return { kind: 'reserved', reservationId: admitted.reservationId, job };
}

/** A refusal in words, naming what holds the slot and what to do (`pair run`, serve: 409/503). */
export function admissionRefused(admitted: AdmitRefusal, cwd: string): RoboguideError {
  if (admitted.reason === 'port_held')
    return new RoboguideError(
      'E_REGISTRY',
      `port ${admitted.port ?? '?'} is held on node ${admitted.node} by batch ${admitted.holderBatchId ?? '?'}: not started`,
      {
        suggestions: [
          'wait for that pair to finish (`roboguide-eval capacity` shows it)',
          'or choose another port',
        ],
      },
    );
  if (admitted.reason === 'mount_nested')
    return new RoboguideError(
      'E_REGISTRY',
      `cwd: ${admitted.source ?? cwd} lies inside, or holds, ${admitted.heldSource ?? '?'}, the writable mount of a running container (batch ${admitted.holderBatchId ?? '?'}): not started`,
      {
        suggestions: [
          'wait for that container to finish (`roboguide-eval capacity` shows it)',
          'or use a folder apart',
        ],
      },
    );
  const what =
    admitted.reason === 'gpu_budget'
      ? `GPU budget (${admitted.held} of ${admitted.limit} MiB held)`
      : `capacity limit (${admitted.held} of ${admitted.limit} held)`;
  return new RoboguideError('E_CAPACITY', `the host is at its ${what}: not started`, {
    suggestions: [
      'wait for running pairs to finish (`roboguide-eval capacity` shows them)',
      'or raise the limit: `roboguide-eval capacity --max-reservations N`',
    ],
  });
}
