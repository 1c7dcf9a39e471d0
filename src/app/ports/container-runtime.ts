import type { Readable } from 'node:stream';
import type { ContainerLimits } from '../../core/pair-limits.js';
import type { FilesystemChanges } from '../../core/sessions-skip.js';
import type { NetworkChoice } from '../../core/pair-network.js';
import type { EngineRuntime } from '../../core/oci-runtime.js';
import type { GpuGrant } from '../../core/gpu/gpu-proof.js';

/** What the runtime needs to create one pair container. Environment values are resolved secrets: never persist. */
export interface ContainerSpec {
  readonly name: string;
  readonly image: string;
  readonly cmd: readonly string[];
  readonly workingDir: string;
  readonly env: Readonly<Record<string, string>>;
  /**
   * `collect`: the folder is evidence the pair writes (its outcome folder). A runtime whose containers do not share
   * this host's file system (swarm) mounts a volume on the node instead and copies it back here (`collectMounts`).
   */
  readonly binds: readonly {
    readonly hostPath: string;
    readonly containerPath: string;
    readonly readOnly: boolean;
    readonly collect?: boolean;
  }[];
  readonly ports: readonly number[];
  readonly bindAddress: string;
  /** `bridge` (absent: the same): the guarded pairs network, outbound only (src/core/pair-network.ts); `none`: loopback only. */
  readonly network?: NetworkChoice;
  readonly deviceRequests: readonly {
    readonly Driver: 'nvidia';
    readonly Count?: number;
    readonly DeviceIDs?: string[];
    readonly Capabilities: string[][];
  }[];
  readonly labels: Readonly<Record<string, string>>;
  readonly stopTimeoutSec: number;
  /** Swarm placement constraints (`node.hostname==gpu-3`, `node.labels.zone==a`); the local engine has one node and ignores them. */
  readonly placement?: readonly string[];
  /** Pids, memory (no swap beyond it), CPU quota and ulimits (src/core/pair-limits.ts). */
  readonly limits?: ContainerLimits;
  /** The OCI runtime (`HostConfig.Runtime`, src/core/oci-runtime.ts); absent: the engine's default. */
  readonly runtime?: string;
}

export interface ContainerHandle {
  readonly id: string;
  readonly name: string;
}

export type ContainerStatus =
  'created' | 'running' | 'paused' | 'restarting' | 'removing' | 'exited' | 'dead';

export interface ContainerState {
  readonly id: string;
  readonly status: ContainerStatus;
  readonly exitCode: number | null;
  readonly oomKilled: boolean;
  readonly startedAt: string | null;
  readonly finishedAt: string | null;
  readonly labels: Readonly<Record<string, string>>;
}

export type WaitResult =
  | { readonly kind: 'exited'; readonly exitCode: number }
  | { readonly kind: 'deadline' }
  | { readonly kind: 'aborted' }
  /**
   * The engine connection was lost (refused, reset, or the wait went silent while the container stopped) or the
   * engine no longer knows the container. Not a verdict: the caller inspects again once the engine answers.
   * `lastSeenAliveMs`: the last moment (epoch ms) the engine showed the container not yet exited.
   */
  | { readonly kind: 'engine_lost'; readonly lastSeenAliveMs: number }
  /** The node that ran the pair is gone (swarm): its engine stopped answering or the swarm marked it down. A verdict. */
  | { readonly kind: 'node_lost'; readonly node: string; readonly message: string };

/** Demultiplexed output of a container: two byte streams that end when the container's output ends. */
export interface ContainerOutput {
  readonly stdout: Readable;
  readonly stderr: Readable;
}

export interface EngineInfo {
  readonly id: string;
  /** The engine serving the API: `podman` when the version endpoint's Components name Podman Engine (issue 28). */
  readonly product?: 'docker' | 'podman';
  /** The product's own version (Podman's, not the Docker API's). */
  readonly version: string;
  readonly apiVersion: string;
  readonly runtimes: readonly string[];
  /** Each registered runtime with its binary and arguments (`docker info` Runtimes), when the engine says. */
  readonly runtimeDetails?: readonly EngineRuntime[];
  /** The engine's default log driver (`docker info` LoggingDriver), when it says. */
  readonly loggingDriver?: string | undefined;
  /** Where the engine keeps images, container layers and json-file logs (`docker info` DockerRootDir), when it says. */
  readonly dataRoot?: string | undefined;
}

export type RemoveResult = 'removed' | 'absent';

/**
 * The Docker engine as the pair lifecycle sees it. Idempotent where cleanup needs it:
 * stop of an exited container, remove of a missing one, and concurrent removes all succeed.
 * Engine failures are thrown as EngineError with a typed `fault`.
 */
export interface ContainerRuntime {
  info(): Promise<EngineInfo>;
  imageExists(image: string): Promise<boolean>;
  /**
   * The image's id (`sha256:…`) on this engine, or null when it is not there: what `e1-batch start` pins (SPEC §3).
   * Optional: a runtime without it (a swarm's) runs its pairs by tag.
   */
  imageId?(image: string): Promise<string | null>;
  create(spec: ContainerSpec): Promise<ContainerHandle>;
  /** Attach before start: the output of the start that follows, from its first byte, each byte once (no log replay). */
  attach(id: string): Promise<ContainerOutput>;
  /** Follow the log API from the container's first byte (reattach after a supervisor restart). */
  follow(id: string): Promise<ContainerOutput>;
  start(id: string): Promise<void>;
  /**
   * Until the container exits, the deadline passes, the signal aborts, or the engine is lost (`engine_lost`, reported
   * at once: a heartbeat inspect notices an engine that went away even when the wait request itself hangs).
   */
  wait(
    id: string,
    options: { readonly deadlineMs: number; readonly signal?: AbortSignal },
  ): Promise<WaitResult>;
  /** SIGTERM, then SIGKILL after `timeoutSec`. Stop of a stopped container is a success. */
  stop(id: string, timeoutSec: number): Promise<void>;
  remove(id: string): Promise<RemoveResult>;
  inspect(id: string): Promise<ContainerState | null>;
  /** The environment the container was created with (resolved values: memory only, never persist). */
  environmentOf(id: string): Promise<Record<string, string> | null>;
  /** A tar stream of `path` inside the container, or null when the path does not exist. */
  getArchive(id: string, path: string): Promise<Readable | null>;
  /**
   * What the container changed in its writable layer, its image id and its mount points (null: no such
   * container). Optional: without it the sessions directory is always copied out.
   */
  filesystemChanges?(id: string): Promise<FilesystemChanges | null>;
  /**
   * What the engine kept of the container's GPU request (its inspect: DeviceRequests, CDI devices), null when the
   * container is gone. Optional: a runtime without it cannot prove a GPU request was kept (issue 28).
   */
  gpuGrantOf?(id: string): Promise<GpuGrant | null>;
  listByLabel(labels: Readonly<Record<string, string>>): Promise<ContainerState[]>;
  /**
   * The actions (`start`, `kill`, `die`…) of the engine's buffered events for one container since `sinceMs`, and
   * whether that history is complete (the engine's small in-memory buffer, emptied by a restart, did not overflow
   * since then). A hint, never the record.
   */
  /**
   * Runtimes whose containers do not share this host's file system: copy what the pair wrote into its `collect`
   * mounts back into their host folders (after it stopped, before the outcome is read). Absent: nothing to copy.
   */
  collectMounts?(id: string): Promise<void>;
  /**
   * Bytes of the container's writable layer (the engine's `SizeRw`, computed by walking the layer; bounded by the
   * call's deadline), null when the container is gone or the runtime cannot tell (the layer is then not counted).
   */
  writableLayerBytes?(id: string): Promise<number | null>;
  containerEventsSince(
    id: string,
    sinceMs: number,
  ): Promise<{ readonly actions: readonly string[]; readonly complete: boolean }>;
}
