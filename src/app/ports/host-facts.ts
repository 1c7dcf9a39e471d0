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

/** What the host facts are asked about (the doctor and `e1-batch start`). */
export interface HostFactsRequest {
  /** The output directory (it may not exist yet: its nearest existing ancestor counts). */
  readonly outputDir: string;
  /**
   * The engine's data root (DockerRootDir), null when the engine did not report it, or a promise of it (doctor asks
   * the engine and the host side by side; a rejection's message is the reason the fact is unknown).
   */
  readonly dataRoot: string | null | PromiseLike<string | null>;
}
