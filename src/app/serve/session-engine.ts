import type { ContainerLimits } from '../../core/pair-limits.js';
import type { Readable } from 'node:stream';
import type { DeviceRequest } from '../../core/gpu/device-requests.js';
import type { EngineRuntime } from '../../core/oci-runtime.js';

/** What the engine needs to create one session container. `env` holds resolved values: memory only. */
export interface SessionContainerSpec {
  readonly name: string;
  readonly image: string;
  readonly env: Readonly<Record<string, string>>;
  readonly workdir: string | undefined;
  readonly binds: readonly {
    readonly hostPath: string;
    readonly containerPath: string;
    readonly readOnly: boolean;
  }[];
  readonly ports: readonly number[];
  readonly bindAddress: string;
  readonly network: 'none' | 'bridge';
  readonly nanoCpus: number | undefined;
  readonly memoryBytes: number | undefined;
  /** Pids, memory (no swap beyond it), CPU quota and ulimits (issue 22); absent: only `nanoCpus`/`memoryBytes`. */
  readonly limits?: ContainerLimits;
  readonly deviceRequests: readonly DeviceRequest[];
  readonly labels: Readonly<Record<string, string>>;
  readonly stopTimeoutSec: number;
  /** The OCI runtime (`runc`, `runsc`…; absent: the engine's default). */
  readonly runtime?: string;
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
  /** SIGKILL to the exec's whole process group (an exec is a session leader), inside the container. */
  killTree(): Promise<void>;
  /** Stop reading (the connection to the engine is closed); `done` then settles. */
  abandon(): void;
}

export interface SessionContainerInfo {
  readonly id: string;
  readonly status: string;
  readonly labels: Readonly<Record<string, string>>;
}

/** What a session's commands and file transfers default to. */
export interface ContainerDefaults {
  /** The container's working directory (the session's workdir, else the image's; '' when neither sets one). */
  readonly workingDir: string;
  /** The container's default user (the session's, else the image's; '' = root). */
  readonly user: string;
}

/** The engine as the session manager sees it (a port; the Docker adapter implements it). */
export interface SessionEngine {
  version(): Promise<string>;
  imageExists(image: string): Promise<boolean>;
  /** The engine's registered runtimes (`docker info` Runtimes); absent: only "runc" is offered. */
  runtimes?(): Promise<readonly EngineRuntime[]>;
  /** Create and start; a container that fails to start is removed before the error is thrown. */
  createAndStart(
    spec: SessionContainerSpec,
  ): Promise<{ readonly id: string; readonly ports: Readonly<Record<string, PublishedPort>> }>;
  exec(id: string, spec: ExecSpec): Promise<ExecHandle>;
  putArchive(id: string, dir: string, tar: Readable): Promise<void>;
  getArchive(id: string, path: string): Promise<Readable | null>;
  /** SIGTERM, then kill after `timeoutSec`; a stopped or missing container is a success. */
  stop(id: string, timeoutSec: number): Promise<void>;
  /** Force-remove; a missing container is a success. */
  remove(id: string): Promise<void>;
  /** null when the engine answers 404. */
  inspect(id: string): Promise<SessionContainerInfo | null>;
  /** Working directory, user and address of a container; null when the engine answers 404. */
  detail(id: string): Promise<SessionContainerDetail | null>;
  /** The container's working directory and default user; null when the engine answers 404. */
  containerDefaults(id: string): Promise<ContainerDefaults | null>;
  listByLabel(labels: Readonly<Record<string, string>>): Promise<SessionContainerInfo[]>;
}
