import type { Readable } from 'node:stream';
import type { FilesystemChanges } from '../../core/sessions-skip.js';
import type { GpuGrant } from '../../core/gpu/gpu-proof.js';
import type { NetworkChoice } from '../../core/pair-network.js';
import type {
  ContainerDiskFootprint,
  ContainerHandle,
  ContainerOutput,
  ContainerRuntime,
  ContainerSpec,
  ContainerState,
  EngineInfo,
  ImageNodes,
  RemoveResult,
  WaitResult,
} from '../../app/ports/container-runtime.js';
import {
  canCheckLinks,
  canCollectMounts,
  canListLayerChanges,
  canMeasureDisk,
  canPinImages,
  canPlaceImages,
  canPrepareNetworks,
  canProveGpuGrants,
  type DiskFootprints,
  type GpuGrants,
  type ImagePins,
  type ImagePlacement,
  type LayerChanges,
  type LinkChecks,
  type MountCollection,
  type NetworkPreparation,
} from '../../app/ports/runtime-capabilities.js';

/**
 * A ContainerRuntime that builds the real one (composition-root's engine client: dockerode and what it pulls in) on
 * its first engine call, once. A command that fails before talking to the engine (invalid input) never loads it. A
 * failure to build it is the failure of that call, and of every later one.
 */
export class LazyContainerRuntime
  implements
    ContainerRuntime,
    ImagePins,
    LayerChanges,
    LinkChecks,
    DiskFootprints,
    GpuGrants,
    NetworkPreparation
{
  readonly #load: () => Promise<ContainerRuntime>;
  #runtime: Promise<ContainerRuntime> | null = null;

  constructor(load: () => Promise<ContainerRuntime>) {
    this.#load = load;
  }

  /** The real runtime (built now if no call did yet). */
  runtime(): Promise<ContainerRuntime> {
    return (this.#runtime ??= this.#load());
  }

  /** Builds the real runtime if no call did yet, and passes it on when it can prepare (never fails). */
  prepareNetwork(choice: NetworkChoice): void {
    this.runtime()
      .then((runtime) => {
        if (canPrepareNetworks(runtime)) runtime.prepareNetwork(choice);
      })
      .catch(() => undefined);
  }

  async info(): Promise<EngineInfo> {
    return (await this.runtime()).info();
  }
  async imageExists(image: string): Promise<boolean> {
    return (await this.runtime()).imageExists(image);
  }
  async imageId(image: string): Promise<string | null> {
    const runtime = await this.runtime();
    return canPinImages(runtime) ? runtime.imageId(image) : (await runtime.imageExists(image)) ? image : null;
  }
  async create(spec: ContainerSpec): Promise<ContainerHandle> {
    return (await this.runtime()).create(spec);
  }
  async attach(id: string): Promise<ContainerOutput> {
    return (await this.runtime()).attach(id);
  }
  async follow(id: string): Promise<ContainerOutput> {
    return (await this.runtime()).follow(id);
  }
  async start(id: string): Promise<void> {
    return (await this.runtime()).start(id);
  }
  async wait(
    id: string,
    options: { readonly deadlineMs: number; readonly signal?: AbortSignal },
  ): Promise<WaitResult> {
    return (await this.runtime()).wait(id, options);
  }
  async stop(id: string, timeoutSec: number): Promise<void> {
    return (await this.runtime()).stop(id, timeoutSec);
  }
  async remove(id: string): Promise<RemoveResult> {
    return (await this.runtime()).remove(id);
  }
  async inspect(id: string): Promise<ContainerState | null> {
    return (await this.runtime()).inspect(id);
  }
  async environmentOf(id: string): Promise<Record<string, string> | null> {
    return (await this.runtime()).environmentOf(id);
  }
  async getArchive(id: string, path: string): Promise<Readable | null> {
    return (await this.runtime()).getArchive(id, path);
  }
  /** Forwarded when the real runtime has it; without it null, which means "copy the sessions dir out". */
  async linkFreePath(id: string, path: string): Promise<boolean> {
    const runtime = await this.runtime();
    return canCheckLinks(runtime) ? runtime.linkFreePath(id, path) : false;
  }
  async filesystemChanges(id: string, under?: string): Promise<FilesystemChanges | null> {
    const runtime = await this.runtime();
    if (!canListLayerChanges(runtime)) return null;
    return under === undefined ? runtime.filesystemChanges(id) : runtime.filesystemChanges(id, under);
  }
  /** Forwarded when the real runtime has it; without it null (only the folders are counted). */
  async diskFootprint(id: string): Promise<ContainerDiskFootprint | null> {
    const runtime = await this.runtime();
    return canMeasureDisk(runtime) ? runtime.diskFootprint(id) : null;
  }
  /** Forwarded when the real runtime has it; without it null (no proof either way: the start goes on, as on a swarm). */
  async gpuGrantOf(id: string): Promise<GpuGrant | null> {
    const runtime = await this.runtime();
    return canProveGpuGrants(runtime) ? runtime.gpuGrantOf(id) : null;
  }
  async listByLabel(labels: Readonly<Record<string, string>>): Promise<ContainerState[]> {
    return (await this.runtime()).listByLabel(labels);
  }
  async containerEventsSince(
    id: string,
    sinceMs: number,
  ): Promise<{ readonly actions: readonly string[]; readonly complete: boolean }> {
    return (await this.runtime()).containerEventsSince(id, sinceMs);
  }
}

/**
 * A lazily built executor whose runtime also collects mounts (the swarm executor): forwarded, so the lifecycle sees
 * it as on the real one. dockerode loads on the first call. Its node and placement inventories are the executor's
 * (composition-root's `createExecutor`), not the runtime's.
 */
export class LazyExecutorRuntime extends LazyContainerRuntime implements ImagePlacement, MountCollection {
  /** A swarm's per-node presence (issue 43); null from a runtime of one engine. */
  async imageNodes(image: string): Promise<ImageNodes | null> {
    const runtime = await this.runtime();
    return canPlaceImages(runtime) ? runtime.imageNodes(image) : null;
  }
  async collectMounts(id: string): Promise<void> {
    const runtime = await this.runtime();
    if (canCollectMounts(runtime)) await runtime.collectMounts(id);
  }
}
