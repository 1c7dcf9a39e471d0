import { DEFAULT_BUDGET_SHARE } from '../../core/image-plan.js';
import type { FileSystemFact, HostFact } from '../../core/host-facts.js';
import { formatBytes, ok, warn, type DoctorCheck } from './check.js';

const NAME = 'image budget';
const HOW =
  'set capacity.image_disk_bytes in the manifest (bytes the images a batch pulls may hold at once), e.g. "capacity": {"image_disk_bytes": 21474836480} for 20 GiB; leave room on the engine data root for container layers and pair logs';

/**
 * Issue 43: the disk a batch's pulled images may hold. Without `capacity.image_disk_bytes` a batch takes a share of
 * the engine data root's free space at start, which also holds every container layer and pair log, and other
 * batches' images: said as a warning with the figure, the free space it comes from, and how to set it. A manifest
 * (`doctor --manifest`) that sets it is ok.
 */
export function imageBudgetCheck(
  dataRoot: HostFact<FileSystemFact>,
  manifestBudgetBytes?: number | null,
): DoctorCheck {
  const free = dataRoot.kind === 'known' ? dataRoot.free_bytes : null;
  const where =
    dataRoot.kind === 'known'
      ? `${formatBytes(dataRoot.free_bytes)} free on the engine data root ${dataRoot.path}`
      : `the engine data root's free space is unknown (${dataRoot.reason})`;
  if (manifestBudgetBytes !== undefined && manifestBudgetBytes !== null) {
    const detail = `capacity.image_disk_bytes ${formatBytes(manifestBudgetBytes)} (the manifest); ${where}`;
    if (free !== null && manifestBudgetBytes > free)
      return warn(NAME, `${detail}: the budget is more than the free space`, HOW);
    return ok(NAME, detail);
  }
  const share = `${DEFAULT_BUDGET_SHARE * 100} %`;
  const budget =
    free === null
      ? `the default is ${share} of the engine data root's free space at start; here it cannot be read, so a batch allows four times its images' compressed size`
      : `the default is ${share} of the engine data root's free space at start: ${formatBytes(Math.floor(free * DEFAULT_BUDGET_SHARE))} now`;
  return warn(
    NAME,
    `a batch whose images are not on the engine pulls them within capacity.image_disk_bytes; ${budget} (${where}), shared with container layers, pair logs and other batches`,
    HOW,
  );
}
