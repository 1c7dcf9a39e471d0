import type { CpuFact, FileSystemFact, GpuController, MemoryFact, OsFact } from '../../core/host-facts.js';

/**
 * What the machine says about itself (CPU, memory, file systems, OS, GPU controllers). Any call may be slow or
 * fail (some shell out: lspci, df, lscpu); callers bound it in time with `gatherHostFacts` (src/app/host-facts.ts),
 * which turns a rejection or a late answer into an unknown fact.
 */
export interface HostFactsSource {
  cpu(): Promise<CpuFact>;
  memory(): Promise<MemoryFact>;
  os(): Promise<OsFact>;
  /**
   * The file system holding `path`. `nearestAncestor`: a path that does not exist yet counts as its nearest
   * existing ancestor (an output directory about to be created); otherwise it must exist here.
   */
  fileSystemOf(path: string, options: { readonly nearestAncestor: boolean }): Promise<FileSystemFact>;
  gpuControllers(): Promise<readonly GpuController[]>;
}
