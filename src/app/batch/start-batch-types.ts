/** What `e1-batch start` (`prepareBatch`, src/app/batch/start-batch.ts) is given: its ports and its options. */
import type { ExecutorConfig } from '../../core/executor.js';
import type { GpuObservation } from '../../core/gpu/nvidia-smi-parse.js';
import type { HostFactsRecord } from '../../core/host-facts.js';
import type { ProtectedPaths } from '../../core/mount-policy.js';
import type { Clock } from '../ports/clock.js';
import type { ContainerRuntime } from '../ports/container-runtime.js';
import type { NodeInventory } from '../ports/executor-inventory.js';
import type { FileSystem } from '../ports/file-system.js';
import type { HostFactsRequest } from '../ports/host-facts.js';
import type { HostIdentity } from '../ports/host-identity.js';
import type { ImagePulls } from '../ports/image-pulls.js';
import type { DockerConfigReader, RegistryCredentials } from './registry-auth.js';
import type { RegistryNeeds } from './registry-needs.js';
import type { SwarmNodeFacts } from './swarm-node-names.js';

/** How `start` reads an image's compressed size from its registry (an adapter; null: unknown). */
export type CompressedSize = (
  image: string,
  digest: string,
  auth: ReturnType<RegistryCredentials['byHost']['get']>,
) => Promise<number | null>;

export interface StartBatchDeps {
  readonly fs: FileSystem;
  /** The boot id recorded in batch.json. */
  readonly host: Pick<HostIdentity, 'bootId' | 'isAlive'>;
  readonly runtime: ContainerRuntime;
  /** Swarm: the nodes admission reserves on (absent: the registry's own node). */
  readonly nodes?: NodeInventory;
  readonly clock: Clock;
  readonly observeGpus?: () => Promise<GpuObservation>;
  /**
   * Opens and checks the host registry (creating it where allowed); called after every check, before any write.
   * Given what the batch's pairs need on this host (published ports, GPU MiB), it throws when a port is held by
   * another batch or a pair needs more GPU memory than the host's whole budget.
   */
  readonly checkRegistry?: (needs: RegistryNeeds) => Promise<void>;
  /** Host facts for batch.json's `host`, asked once every check has passed (never rejects). */
  readonly hostFacts?: (request: HostFactsRequest) => Promise<HostFactsRecord>;
  /** Swarm: the nodes that take work now (`node`: hostname, `id`: swarm node id), with their GPUs. */
  readonly swarmNodes?: () => Promise<readonly SwarmNodeFacts[]>;
  /** Issue 43: the engine's image calls; with them an image the engine lacks is resolved in its registry, not refused. */
  readonly imagePulls?: ImagePulls;
  /** The compressed size of an image at a digest, from its registry (null: unknown). */
  readonly compressedSize?: CompressedSize;
  /** `~/.docker/config.json` for `registries.<host>.docker_config`. */
  readonly readDockerConfig?: DockerConfigReader;
}

export interface StartBatchOptions {
  readonly manifestPath: string;
  readonly output: string;
  readonly registryPath: string;
  readonly bindAddress: string;
  readonly environment: Readonly<Record<string, string | undefined>>;
  readonly codeVersion: string;
  /** The host's IP addresses: when given, `bindAddress` must be one of them (or 0.0.0.0 / ::). */
  readonly hostAddresses?: readonly string[];
  /** $HOME and the engine's sockets: no job may get them mounted (the output directory and registry always count). */
  readonly hostPaths?: Pick<ProtectedPaths, 'homeDir' | 'engineSocketPaths' | 'homeDirs' | 'ownedDirs'>;
  /** The operator's `--mount-root` folders: when given, every cwd must lie under one of them; recorded in batch.json (real paths). */
  readonly mountRoots?: readonly string[];
  /** Accept `${NAME}` values shorter than 8 characters (masked anyway); recorded in batch.json. */
  readonly allowShortSecrets?: boolean;
  readonly onWarning?: (message: string) => void;
  /** Where pairs run (absent: local). Swarm GPUs are the nodes' generic resources: this host's GPUs are not observed. */
  readonly executor?: ExecutorConfig;
  /** The command the user runs (`bin/roboguide-eval`, or the installed binary's name): hints name it. */
  readonly bin?: string;
  /** `--prune-own-images`: the image plan may remove images the engine had before the batch. */
  readonly pruneOwnImages?: boolean;
  /** `--output` as the user typed it: hints name it so (default: `output`). */
  readonly outputAsTyped?: string;
}
