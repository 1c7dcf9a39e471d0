import { PassThrough, type Readable } from 'node:stream';
import type Docker from 'dockerode';
import type {
  ContainerDiskFootprint,
  ContainerHandle,
  ContainerOutput,
  ContainerRuntime,
  ContainerSpec,
  ContainerState,
  EngineInfo,
  RemoveResult,
  WaitResult,
} from '../../app/ports/container-runtime.js';
import type {
  DiskFootprints,
  GpuGrants,
  ImagePins,
  LayerChanges,
  LinkChecks,
  NetworkPreparation,
} from '../../app/ports/runtime-capabilities.js';
import { sleep } from '../system-clock.js';
import type { FilesystemChanges } from '../../core/sessions-skip.js';
import { CDI_DEVICE_NAME, type GpuGrant } from '../../core/gpu/gpu-proof.js';
import { EngineError } from '../../app/ports/engine-error.js';
import type { PairNetworkGuard } from '../../app/ports/pair-network.js';
import { networkModeFor, type NetworkChoice } from '../../core/pair-network.js';
import { createOptions, createRequest, PAIR_LOG_CONFIG } from './container-create.js';
import { demultiplex } from './demux.js';
import { diskFootprintOf, type FootprintInspect } from './disk-footprint.js';
import { Dockerode } from './dockerode.js';
import {
  changesList,
  containerEvents,
  containerStateOf,
  inspectOr404,
  linkFreePathOf,
} from './docker-container-reads.js';
import { waitForContainer } from './docker-wait.js';
import { firstComponent, layerHoldsAbove } from './upper-layer.js';
import {
  DEFAULT_ENGINE_CALL_TIMEOUT_MS,
  engineInfoOf,
  listedStateOf,
  probeEngineFacts,
  type EarlyEngineFacts,
  type InfoBody,
  type VersionBody,
} from './engine-probe.js';
import { ENGINE_FACTS_REUSE_MS, EngineFactsCache } from './engine-facts.js';
import { EngineSeccompOption } from './seccomp-option.js';
import { statusOf, toEngineError, engineMessageOf } from './engine-error.js';

const REMOVE_RETRY_MS = 100;
const REMOVE_RETRY_LIMIT = 100;
/** Buffer of each demultiplexed stream (docs/benchmarks.md, logs). */
const SPLIT_HIGH_WATER_MARK_BYTES = 256 * 1024;
/** How often a waiting pair's container is inspected. */
const HEARTBEAT_MS = 2_000;
/**
 * A stopped container whose wait has not answered within this long: the wait's connection is dead (a dockerd that
 * restarted between two heartbeats). Generous, so a busy engine's late answer is never taken for a lost one.
 */
const SILENT_WAIT_GRACE_MS = 10_000;
/** A container's changes list past these is not waited for nor read: the sessions are copied out instead. */
const CHANGES_TIMEOUT_MS = 5_000;
const CHANGES_MAX_BYTES = 8 * 2 ** 20;
/** Starting may run OCI hooks (the NVIDIA one enumerates GPUs): allow it longer. */
const START_TIMEOUT_MS = 180_000;

/** Options for connecting: default is DOCKER_HOST or /var/run/docker.sock. */
export type DockerConnection = Docker.DockerOptions;

/** ContainerRuntime over the Docker Engine API (dockerode). Every engine error is mapped once, here. */
export class DockerContainerRuntime
  implements
    ContainerRuntime,
    ImagePins,
    LayerChanges,
    LinkChecks,
    GpuGrants,
    DiskFootprints,
    NetworkPreparation
{
  readonly docker: Docker;
  readonly #callTimeoutMs: number;
  readonly #heartbeatMs: number;
  readonly #silentWaitGraceMs: number;
  readonly #changesTimeoutMs: number;
  readonly #changesMaxBytes: number;
  readonly #pairNetwork: PairNetworkGuard | null;
  #earlyFacts: EarlyEngineFacts | null;
  /** `info` + `version`, asked once for the calls close together (engine-facts.ts). */
  readonly #facts = new EngineFactsCache(() => this.#askFacts());
  /** Our seccomp profile as this engine takes it (container-create). */
  readonly seccomp = new EngineSeccompOption(() => this.#facts.get().then(([, version]) => version));

  /**
   * `callTimeoutMs` bounds every short engine call (inspect, create, remove, …): a hung engine becomes an
   * EngineError the cleanup path can record, instead of a pair stuck forever. `wait` and streams are unbounded;
   * `wait` inspects the container every `heartbeatMs` to notice an engine that went away.
   */
  constructor(
    connection?: DockerConnection | Docker,
    options: {
      callTimeoutMs?: number;
      heartbeatMs?: number;
      silentWaitGraceMs?: number;
      changesTimeoutMs?: number;
      changesMaxBytes?: number;
      /**
       * The guarded pairs network (src/core/pair-network.ts): network "bridge" is ours, ensured before every create.
       * Without it "bridge" is the engine's default bridge network (tests on a shared engine, whose firewall is not ours).
       */
      pairNetwork?: PairNetworkGuard;
      /** The facts asked before dockerode loaded (askEngineFactsEarly): the first `info` takes them if on this socket. */
      earlyFacts?: EarlyEngineFacts | null;
    } = {},
  ) {
    this.docker = connection instanceof Dockerode ? connection : new Dockerode(connection);
    this.#callTimeoutMs = options.callTimeoutMs ?? DEFAULT_ENGINE_CALL_TIMEOUT_MS;
    this.#heartbeatMs = options.heartbeatMs ?? HEARTBEAT_MS;
    this.#silentWaitGraceMs = options.silentWaitGraceMs ?? SILENT_WAIT_GRACE_MS;
    this.#changesTimeoutMs = options.changesTimeoutMs ?? CHANGES_TIMEOUT_MS;
    this.#changesMaxBytes = options.changesMaxBytes ?? CHANGES_MAX_BYTES;
    this.#pairNetwork = options.pairNetwork ?? null;
    this.#earlyFacts = options.earlyFacts ?? null;
  }

  /**
   * The NetworkMode of a container on `choice`: "none", or the guarded pairs network once its rules are in place
   * (ensured on every call: a pair never starts on it unguarded). A guard that cannot be ensured is an EngineError, so
   * the pair fails closed before any container exists (infrastructure_failure, the reason in `engine_error`).
   */
  async networkMode(choice: NetworkChoice): Promise<string> {
    if (choice === 'none') return 'none';
    // The egress network was ensured with the pair's lease (EgressBroker.open), before this create.
    if (choice === 'allowlist') return networkModeFor(choice);
    if (this.#pairNetwork === null) return 'bridge';
    try {
      await this.#pairNetwork.ensure();
    } catch (err) {
      if (err instanceof EngineError) throw err;
      const message = err instanceof Error ? err.message : String(err);
      throw new EngineError('engine_error', `the pairs network could not be guarded: ${message}`, {
        statusCode: null,
        engineMessage: message,
        cause: err,
      });
    }
    return networkModeFor(choice);
  }

  /** The guarded pairs network's rules listed now, for the next create on it to take (NetworkPreparation). */
  prepareNetwork(choice: NetworkChoice): void {
    if (choice === 'bridge') this.#pairNetwork?.prepare?.();
  }

  /** Bound the wait for a streaming call's response only; the stream itself is bounded by whoever reads it. */
  async #untilResponse<T>(call: (abortSignal: AbortSignal) => Promise<T>): Promise<T> {
    const response = new AbortController();
    const timer = setTimeout(() => response.abort(), this.#callTimeoutMs);
    try {
      return await call(response.signal);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * The engine is reached through a unix socket of this host (its layers' folders are this host's): docker-modem's
   * socket path (a path, or its function that finds the default one), never a TCP or SSH host.
   */
  #localEngine(): boolean {
    const modem = this.docker.modem as { socketPath?: unknown; host?: unknown };
    const socket = modem.socketPath;
    return (typeof socket === 'string' || typeof socket === 'function') && modem.host === undefined;
  }

  #deadline(ms = this.#callTimeoutMs): { abortSignal: AbortSignal } {
    return { abortSignal: AbortSignal.timeout(ms) };
  }

  /**
   * `info` and `version`: on a unix socket one request of ours (engine-probe.ts: the two cost the engine about 20 ms of
   * CPU each, issue 39), on any other transport dockerode's two.
   */
  async #askFacts(): Promise<[InfoBody, VersionBody]> {
    const early = this.#earlyFacts;
    this.#earlyFacts = null;
    const socketPath = await unixSocketOf(this.docker);
    // Asked before dockerode loaded, on the socket it talks to, moments ago: that answer (once).
    if (
      early !== null &&
      early.socketPath === socketPath &&
      performance.now() - early.atMs < ENGINE_FACTS_REUSE_MS
    )
      return early.answer;
    if (socketPath !== null) return probeEngineFacts(socketPath, this.#callTimeoutMs);
    return Promise.all([this.docker.info() as Promise<InfoBody>, this.docker.version()]);
  }

  async info(): Promise<EngineInfo> {
    try {
      const [info, version] = await this.#facts.get();
      return engineInfoOf(info, version);
    } catch (err) {
      throw toEngineError(err, 'query the engine');
    }
  }

  async imageExists(image: string): Promise<boolean> {
    return (await this.imageId(image)) !== null;
  }

  async imageId(image: string): Promise<string | null> {
    try {
      const info = (await this.docker.getImage(image).inspect()) as { Id?: string };
      return info.Id ?? null;
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw toEngineError(err, 'inspect an image', image);
    }
  }

  async create(spec: ContainerSpec): Promise<ContainerHandle> {
    const options = createOptions(spec, await this.networkMode(spec.network ?? 'bridge'), {
      config: {
        Cmd: [...spec.cmd],
        WorkingDir: spec.workingDir,
        OpenStdin: false,
        AttachStdout: true,
        AttachStderr: true,
      },
      hostConfig: { LogConfig: { Type: PAIR_LOG_CONFIG.type, Config: { ...PAIR_LOG_CONFIG.config } } },
      seccomp: await this.seccomp.option(),
    });
    try {
      const container = await this.docker.createContainer(
        createRequest(options, this.#deadline().abortSignal),
      );
      return { id: container.id, name: spec.name };
    } catch (err) {
      throw toEngineError(err, 'create a container', spec.image);
    }
  }

  async attach(id: string): Promise<ContainerOutput> {
    try {
      const stream = await this.#untilResponse(
        (abortSignal) =>
          this.docker
            .getContainer(id)
            // No `logs`: the engine registers the stream before it answers, so a container started after the answer
            // loses nothing; a log replay would run after that registration and deliver early lines twice.
            .attach({
              stream: true,
              stdout: true,
              stderr: true,
              logs: false,
              abortSignal,
            }) as unknown as Promise<Readable>,
      );
      return this.split(stream);
    } catch (err) {
      throw toEngineError(err, 'attach to a container');
    }
  }

  async follow(id: string): Promise<ContainerOutput> {
    try {
      const stream = await this.#untilResponse(
        (abortSignal) =>
          this.docker.getContainer(id).logs({
            abortSignal,
            follow: true,
            stdout: true,
            stderr: true,
          } as Docker.ContainerLogsOptions & { follow: true }) as unknown as Promise<Readable>,
      );
      return this.split(stream);
    } catch (err) {
      throw toEngineError(err, 'follow container logs');
    }
  }

  private split(stream: Readable): ContainerOutput {
    // Room for a few engine frames (32 KiB each on engine 20.10): fewer waits for `drain` per frame.
    const stdout = new PassThrough({ highWaterMark: SPLIT_HIGH_WATER_MARK_BYTES });
    const stderr = new PassThrough({ highWaterMark: SPLIT_HIGH_WATER_MARK_BYTES });
    demultiplex(stream, stdout, stderr).catch((err: unknown) => {
      // The source failed (engine gone, connection reset): end both sides with the error so readers see it.
      stdout.destroy(err as Error);
      stderr.destroy(err as Error);
    });
    return { stdout, stderr };
  }

  async start(id: string): Promise<void> {
    try {
      await this.docker.getContainer(id).start(this.#deadline(START_TIMEOUT_MS));
    } catch (err) {
      if (statusOf(err) === 304) return; // already started
      throw toEngineError(err, 'start a container');
    }
  }

  wait(id: string, options: { deadlineMs: number; signal?: AbortSignal }): Promise<WaitResult> {
    return waitForContainer(this.docker, id, options, {
      heartbeatMs: this.#heartbeatMs,
      silentWaitGraceMs: this.#silentWaitGraceMs,
    });
  }

  async stop(id: string, timeoutSec: number): Promise<void> {
    try {
      await this.docker
        .getContainer(id)
        .stop({ t: timeoutSec, ...this.#deadline(timeoutSec * 1000 + this.#callTimeoutMs) });
    } catch (err) {
      const status = statusOf(err);
      if (status === 304 || status === 404) return; // already stopped / already gone
      if (status === 409 && /is not running|removal/i.test(engineMessageOf(err))) return;
      throw toEngineError(err, 'stop a container');
    }
  }

  async remove(id: string): Promise<RemoveResult> {
    for (let attempt = 0; ; attempt++) {
      try {
        await this.docker.getContainer(id).remove({ force: true, v: true, ...this.#deadline() });
        return 'removed';
      } catch (err) {
        const status = statusOf(err);
        if (status === 404) return 'absent';
        if (
          status === 409 &&
          /already in progress/i.test(engineMessageOf(err)) &&
          attempt < REMOVE_RETRY_LIMIT
        ) {
          await sleep(REMOVE_RETRY_MS);
          continue;
        }
        throw toEngineError(err, 'remove a container');
      }
    }
  }

  async #inspectRaw<T = Docker.ContainerInspectInfo>(
    id: string,
    options: { readonly size?: boolean } = {},
    action?: string,
  ): Promise<T | null> {
    return inspectOr404<T>(this.docker, id, this.#deadline().abortSignal, options, action);
  }

  async inspect(id: string): Promise<ContainerState | null> {
    const c = await this.#inspectRaw(id);
    return c && containerStateOf(c);
  }

  async gpuGrantOf(id: string): Promise<GpuGrant | null> {
    const c = await this.#inspectRaw<{
      HostConfig?: { DeviceRequests?: unknown[] | null; Devices?: { PathOnHost?: string }[] | null };
    }>(id);
    if (c === null) return null;
    const devices = Array.isArray(c.HostConfig?.Devices) ? c.HostConfig.Devices : [];
    return {
      deviceRequests: Array.isArray(c.HostConfig?.DeviceRequests) ? c.HostConfig.DeviceRequests.length : 0,
      cdiDevices: devices.filter((d) => CDI_DEVICE_NAME.test(d.PathOnHost ?? '')).length,
    };
  }

  async diskFootprint(id: string): Promise<ContainerDiskFootprint | null> {
    const c = await this.#inspectRaw<FootprintInspect>(id, { size: true }, "measure a container's disk");
    return c && diskFootprintOf(c);
  }

  async environmentOf(id: string): Promise<Record<string, string> | null> {
    const c = await this.#inspectRaw(id);
    if (c === null) return null;
    const env: Record<string, string> = {};
    for (const entry of c.Config.Env ?? []) {
      const at = entry.indexOf('=');
      if (at > 0) env[entry.slice(0, at)] = entry.slice(at + 1);
    }
    return env;
  }

  async getArchive(id: string, path: string): Promise<Readable | null> {
    try {
      return await this.#untilResponse(
        (abortSignal) =>
          this.docker.getContainer(id).getArchive({ path, abortSignal }) as unknown as Promise<Readable>,
      );
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw toEngineError(err, 'copy files out of a container');
    }
  }

  /**
   * A pair is hostile: a layer of millions of files makes a huge, slow changes list. It is read as a stream, within
   * CHANGES_MAX_BYTES and CHANGES_TIMEOUT_MS; past either it is an error (the caller then copies as usual). With
   * `under`, only what decides whether `under` was touched is listed: read on this host when the engine is (one lstat
   * in the layer's folder, whatever the layer holds), the engine's list otherwise.
   */
  async filesystemChanges(id: string, under?: string): Promise<FilesystemChanges | null> {
    try {
      if (under !== undefined && this.#localEngine()) {
        // What decides `under` read in the container's layer on this host (upper-layer.ts), the engine's list only
        // where that cannot be told: one inspect and one lstat instead of the engine's walk (issue 39).
        const c = await this.docker.getContainer(id).inspect(this.#deadline());
        const held = layerHoldsAbove(c.GraphDriver, under);
        if (held !== null) {
          return {
            imageId: c.Image ?? '',
            changed: held ? [`/${firstComponent(under) ?? ''}`] : [],
            mounts: (c.Mounts ?? []).map((m) => m.Destination),
          };
        }
      }
      const abortSignal = AbortSignal.timeout(this.#changesTimeoutMs);
      const [c, changes] = await Promise.all([
        this.docker.getContainer(id).inspect(this.#deadline()),
        changesList(this.docker, id, abortSignal, this.#changesMaxBytes),
      ]);
      return {
        imageId: c.Image ?? '',
        changed: (changes ?? []).map((change) => change.Path),
        mounts: (c.Mounts ?? []).map((m) => m.Destination),
      };
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw toEngineError(err, 'list the changes of a container');
    }
  }

  linkFreePath(id: string, path: string): Promise<boolean> {
    const exists = async (): Promise<boolean> => (await this.inspect(id).catch(() => null)) !== null;
    return linkFreePathOf(this.docker, id, path, { deadline: () => this.#deadline(), exists });
  }

  async listByLabel(labels: Readonly<Record<string, string>>): Promise<ContainerState[]> {
    try {
      const list = await this.docker.listContainers({
        ...this.#deadline(),
        all: true,
        filters: { label: Object.entries(labels).map(([k, v]) => (v === '' ? k : `${k}=${v}`)) },
      });
      return list.map(listedStateOf);
    } catch (err) {
      throw toEngineError(err, 'list containers');
    }
  }

  async containerEventsSince(
    id: string,
    sinceMs: number,
  ): Promise<{ actions: readonly string[]; complete: boolean }> {
    try {
      return await containerEvents(this.docker, id, sinceMs, this.#deadline().abortSignal);
    } catch (err) {
      throw toEngineError(err, 'read engine events');
    }
  }
}

/**
 * The unix socket dockerode talks to, null for tcp, TLS or ssh: docker-modem's own choice (`getSocketPath`: the
 * socket given, DOCKER_HOST's, or its default, which it looks for on the first call).
 */
async function unixSocketOf(docker: Docker): Promise<string | null> {
  if (process.platform === 'win32') return null;
  const modem = docker.modem as { getSocketPath?: () => Promise<unknown> } | undefined;
  const socketPath = await modem?.getSocketPath?.();
  return typeof socketPath === 'string' && socketPath !== '' ? socketPath : null;
}
