/** Input checks at the registry boundary: bad limits or requests are the caller's fault. */
import { InvalidInputError, type Issue } from '../../core/errors.js';
import type { AdmitRequest, HostLimits } from '../../app/ports/capacity-registry.js';

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
  if (issues.length > 0) throw new InvalidInputError('E_USAGE', 'invalid admission request', issues);
}
