/** Input checks at the registry boundary: bad limits or requests are the caller's fault. */
import { InvalidInputError, RoboguideError, type Issue } from '../../core/errors.js';
import type { AdmissionDecision } from '../../core/admission-rule.js';
import type {
  AdmitRequest,
  AdmitResult,
  HostLimits,
  Reservation,
} from '../../app/ports/capacity-registry.js';

function isCount(value: number, min: number): boolean {
  return Number.isSafeInteger(value) && value >= min;
}

export function checkLimits(limits: HostLimits): void {
  const issues: Issue[] = [];
  if (!isCount(limits.maxReservations, 1))
    issues.push({ path: 'maxReservations', rule: 'must be an integer >= 1' });
  if (limits.gpuMib !== null && !isCount(limits.gpuMib, 0)) {
    issues.push({ path: 'gpuMib', rule: 'must be null or an integer >= 0' });
  }
  if (issues.length > 0) throw new InvalidInputError('E_USAGE', 'invalid host limits', issues);
}

export function checkAdmitRequest(request: AdmitRequest): void {
  const issues: Issue[] = [];
  for (const key of ['batchId', 'jobId', 'claimId'] as const) {
    if (request[key].length === 0) issues.push({ path: key, rule: 'must not be empty' });
  }
  if (!isCount(request.gpuMib, 0)) issues.push({ path: 'gpuMib', rule: 'must be an integer >= 0' });
  if (request.node !== undefined && !isNodeName(request.node)) issues.push({ path: 'node', rule: NODE_RULE });
  (request.ports ?? []).forEach((port, k) => {
    if (!(Number.isSafeInteger(port) && port >= 1 && port <= 65_535))
      issues.push({ path: `ports[${k}]`, rule: 'must be an integer 1..65535' });
  });
  if (request.evidenceFolder !== undefined && !request.evidenceFolder.startsWith('/'))
    issues.push({ path: 'evidenceFolder', rule: 'must be an absolute path' });
  (request.readOnlyMounts ?? []).forEach((source, k) => {
    if (!source.startsWith('/'))
      issues.push({ path: `readOnlyMounts[${k}]`, rule: 'must be an absolute path' });
  });
  (request.writableMounts ?? []).forEach((source, k) => {
    if (!source.startsWith('/'))
      issues.push({ path: `writableMounts[${k}]`, rule: 'must be an absolute path' });
  });
  if (issues.length > 0) throw new InvalidInputError('E_USAGE', 'invalid admission request', issues);
}

const NODE_RULE = 'must be 1..253 characters, none of them a control character';

function isNodeName(node: string): boolean {
  // eslint-disable-next-line no-control-regex -- control characters are what is refused
  return node.length >= 1 && node.length <= 253 && !/[\u0000-\u001f\u007f]/.test(node);
}

export function checkNode(node: string): void {
  if (!isNodeName(node))
    throw new InvalidInputError('E_USAGE', 'invalid node', [{ path: 'node', rule: NODE_RULE }]);
}

/** The answer to an admission `decideAdmission` did not admit: nothing is stored; a claim of another run throws. */
export function unstoredAdmission(
  request: AdmitRequest,
  decision: Exclude<AdmissionDecision, { kind: 'admit' }>,
): AdmitResult {
  if (decision.kind !== 'claim_taken') return decision;
  throw new RoboguideError('E_REGISTRY', `claim ${request.claimId} is already admitted for another run`, {
    context: { claimId: request.claimId, batchId: decision.batchId, jobId: decision.jobId },
  });
}

/** Attaching a container to a reservation: it must exist, be held, and not name another container (E_REGISTRY). */
export function checkAttach(
  reservation: Pick<Reservation, 'state' | 'containerId'> | null,
  reservationId: string,
  containerId: string,
): void {
  const problem =
    reservation === null
      ? 'is unknown'
      : reservation.state !== 'held'
        ? 'is not held'
        : reservation.containerId !== null && reservation.containerId !== containerId
          ? `already has container ${reservation.containerId}`
          : null;
  if (problem === null) return;
  throw new RoboguideError(
    'E_REGISTRY',
    `cannot attach a container: reservation ${reservationId} ${problem}`,
    {
      context: { reservationId, containerId },
    },
  );
}
