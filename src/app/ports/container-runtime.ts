import type { Readable } from 'node:stream';
import type { ContainerLimits } from '../../core/pair-limits.js';
import type { NetworkChoice } from '../../core/pair-network.js';
import type { EngineRuntime } from '../../core/oci-runtime.js';
import type { DeviceRequest } from '../../core/gpu/device-requests.js';

/** A host folder mounted into a container (a Mounts entry, never a Binds string: a missing source is an error). */
export interface BindMount {
  readonly hostPath: string;
  readonly containerPath: string;
  readonly readOnly: boolean;
}

/**
 * What every container of ours is created with, a pair's or a session's: one shape, turned into the engine's
 * create options in one place (the Docker adapter's container-create.ts). Environment values are resolved
 * secrets: never persist.
 */
export interface ContainerBase {
  readonly name: string;
  readonly image: string;
  readonly env: Readonly<Record<string, string>>;
  readonly binds: readonly BindMount[];
  readonly ports: readonly number[];
  readonly bindAddress: string;
  /**
   * `bridge` (absent: the same): the guarded pairs network, outbound only (src/core/pair-network.ts);
   * `none`: loopback only.
   */
  readonly network?: NetworkChoice;
  /** The container's DNS servers (`HostConfig.Dns`); absent: the engine's. An allowlisted pair's is the egress gateway. */
  readonly dns?: readonly string[];
  /**
   * Its link-layer address on its network (`MacAddress`); absent: the engine's (made from its IPv4 address, so the
   * next container to get that address gets it too). An allowlisted pair's is its egress lease's, never another's.
   */
  readonly macAddress?: string;
  readonly deviceRequests: readonly DeviceRequest[];
  readonly labels: Readonly<Record<string, string>>;
  readonly stopTimeoutSec: number;
  /** Pids, memory (no swap beyond it), CPU quota and ulimits (src/core/pair-limits.ts). */
  readonly limits?: ContainerLimits;
  /** The OCI runtime (`HostConfig.Runtime`, src/core/oci-runtime.ts); absent: the engine's default. */
  readonly runtime?: string;
}

/** What the runtime needs to create one pair container. */
export interface ContainerSpec extends ContainerBase {
  readonly cmd: readonly string[];
  readonly workingDir: string;
  /**
   * `collect`: the folder is evidence the pair writes (its outcome folder). A runtime whose containers do not share
   * this host's file system (swarm) mounts a volume on the node instead and copies it back here (`collectMounts`).
   */
  readonly binds: readonly (BindMount & { readonly collect?: boolean })[];
  /**
   * Swarm placement constraints (`node.hostname==gpu-3`, `node.labels.zone==a`); the local engine has one node
   * and ignores them.
   */
  readonly placement?: readonly string[];
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
/** A container's disk outside the pair's folders (ContainerRuntime.diskFootprint). */
export interface ContainerDiskFootprint {
  /** The writable layer's bytes (the engine's `SizeRw`, computed by walking the layer). */
  readonly layerBytes: number;
  /**
   * The host folders of its volumes (the anonymous ones an image's `VOLUME` makes, any named one) and the engine's
   * own files bound writable into it (`/etc/hosts`, `/etc/resolv.conf`, `/etc/hostname`): all outside the layer.
   */
  readonly volumeDirs: readonly string[];
  /** Its first process on the host while it runs (the open-file scan starts there), else null. */
  readonly pid: number | null;
}

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
  /** `docker info` SecurityOptions (`name=seccomp,profile=default`, `name=userns`, `name=rootless`), when it says. */
  readonly securityOptions?: readonly string[] | undefined;
}

export type RemoveResult = 'removed' | 'absent';

/**
 * The engine operations pairs and sessions share: one signature each, extended below by what only pairs
 * (`ContainerRuntime`) and only sessions (`SessionEngine`) need. Idempotent where cleanup needs it: stop of an
 * exited container, remove of a missing one, and concurrent removes all succeed. Engine failures are thrown as
 * EngineError with a typed `fault`. Removal is verified by one function over these (src/app/pair/remove-and-verify.ts).
 */
export interface ContainerEngine {
  info(): Promise<EngineInfo>;
  imageExists(image: string): Promise<boolean>;
  /** SIGTERM, then SIGKILL after `timeoutSec`. Stop of a stopped or missing container is a success. */
  stop(id: string, timeoutSec: number): Promise<void>;
  /** Force-remove (with its anonymous volumes); a missing container is `absent`, not an error. */
  remove(id: string): Promise<RemoveResult>;
  /** null when the engine answers 404. */
  inspect(id: string): Promise<ContainerState | null>;
  /** Every container (running or not) carrying all of `labels` (an empty value: the label with any value). */
  listByLabel(labels: Readonly<Record<string, string>>): Promise<ContainerState[]>;
}

/** Where an image is on a swarm: the nodes (by name) that hold it and those that do not. */
export interface ImageNodes {
  readonly present: readonly string[];
  readonly absent: readonly string[];
}

/**
 * The engine as the pair lifecycle sees it: closed (every method required). What only some runtimes do is a capability
 * of its own (src/app/ports/runtime-capabilities.ts), asked for with its typed check.
 */
export interface ContainerRuntime extends ContainerEngine {
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
  /** The environment the container was created with (resolved values: memory only, never persist). */
  environmentOf(id: string): Promise<Record<string, string> | null>;
  /** A tar stream of `path` inside the container, or null when the path does not exist. */
  getArchive(id: string, path: string): Promise<Readable | null>;
  /**
   * The actions (`start`, `kill`, `die`…) of the engine's buffered events for one container since `sinceMs`, and
   * whether that history is complete (the engine's small in-memory buffer, emptied by a restart, did not overflow
   * since then). A hint, never the record.
   */
  containerEventsSince(
    id: string,
    sinceMs: number,
  ): Promise<{ readonly actions: readonly string[]; readonly complete: boolean }>;
}

/** What the engine needs to create one session container (src/app/serve): a pair's shape, a few more choices. */
export interface SessionContainerSpec extends ContainerBase {
  readonly network: NetworkChoice;
  readonly workdir: string | undefined;
  readonly nanoCpus: number | undefined;
  readonly memoryBytes: number | undefined;
  /** The container's default user; absent: the image's. */
  readonly user?: string | undefined;
  /** The capabilities it keeps (all others dropped); absent: a pair's set. */
  readonly capabilities?: readonly string[];
  /** Its main command (the image's entrypoint kept); absent: the keep-alive. */
  readonly command?: readonly string[] | undefined;
  /** `/etc/hosts` lines, "NAME:IP" or "NAME:host-gateway". */
  readonly extraHosts?: readonly string[];
}

/** What the engine says of a session's container now (GET /v1/sessions/{id}). */
export interface SessionContainerDetail {
  readonly workdir: string;
  readonly user: string;
  /** Its address on its network; null without one. */
  readonly ipAddress: string | null;
}

export interface PublishedPort {
  readonly host_ip: string;
  readonly host_port: number;
}

export interface ExecSpec {
  readonly argv: readonly string[];
  readonly cwd?: string | undefined;
  readonly env?: Readonly<Record<string, string>> | undefined;
  readonly user?: string | undefined;
  /** Written to the command's standard input, then closed: bytes, or a stream piped in with backpressure. */
  readonly stdin?: Buffer | Readable | undefined;
}

/** A running exec: its two output streams end when every holder of the exec's pipes is gone. */
export interface ExecHandle {
  readonly stdout: Readable;
  readonly stderr: Readable;
  /** Resolves once the output has ended, with the exec's exit code (null when the engine does not know it). */
  readonly done: Promise<number | null>;
  /**
   * Settles with `done`: false when the engine may not have started the command (no process and 126 or 127: a
   * working directory or a user it could not set, an executable it could not find); its output is then the runtime's
   * own words (`OCI runtime exec failed: …`), not the command's. Absent: the engine cannot tell (taken as started).
   */
  readonly started?: Promise<boolean>;
  /** SIGKILL to the exec's whole process group (an exec is a session leader), inside the container. */
  killTree(): Promise<void>;
  /** Stop reading (the connection to the engine is closed); `done` then settles. */
  abandon(): void;
}

/** What a session's commands and file transfers default to. */
export interface ContainerDefaults {
  /** The container's working directory (the session's workdir, else the image's; '' when neither sets one). */
  readonly workingDir: string;
  /** The container's default user (the session's, else the image's; '' = root). */
  readonly user: string;
}

/** The engine as the session manager sees it: the shared operations, and what only a session does. */
export interface SessionEngine extends ContainerEngine {
  /** Create and start; a container that fails to start is removed before the error is thrown. */
  createAndStart(
    spec: SessionContainerSpec,
  ): Promise<{ readonly id: string; readonly ports: Readonly<Record<string, PublishedPort>> }>;
  exec(id: string, spec: ExecSpec): Promise<ExecHandle>;
  putArchive(id: string, dir: string, tar: Readable): Promise<void>;
  /** Working directory, user and address of a container; null when the engine answers 404. */
  detail(id: string): Promise<SessionContainerDetail | null>;
  /** The container's working directory and default user; null when the engine answers 404. */
  containerDefaults(id: string): Promise<ContainerDefaults | null>;
  /** Execs running in the container now (e.g. left by a server that was killed), with their commands. */
  runningExecs(id: string): Promise<readonly RunningExec[]>;
  /** Kills a running exec's process tree (SIGKILL to its process group) and resolves once it has ended. */
  killExec(containerId: string, execId: string): Promise<void>;
}

/** What the engine reports of a session's container: `die` (its main process ended) or `destroy` (removed). */
export interface ContainerEndEvent {
  readonly sessionId: string;
  readonly containerId: string;
  readonly action: 'die' | 'destroy';
  readonly exitCode: number | null;
}

/** An exec the engine says is running: its id and its command (entrypoint and arguments). */
export interface RunningExec {
  readonly id: string;
  readonly argv: readonly string[];
}
