import { PassThrough, type Readable } from 'node:stream';
import Docker from 'dockerode';
import type {
  ContainerHandle,
  ContainerOutput,
  ContainerRuntime,
  ContainerSpec,
  ContainerState,
  ContainerStatus,
  EngineInfo,
  RemoveResult,
  WaitResult,
} from '../../app/ports/container-runtime.js';
import { PAIR_CAPABILITIES, type ContainerLimits } from '../../core/pair-limits.js';
import type { FilesystemChanges } from '../../core/sessions-skip.js';
import { CDI_DEVICE_NAME, type GpuGrant } from '../../core/gpu/gpu-proof.js';
import { EngineError } from '../../app/ports/engine-error.js';
import type { PairNetworkGuard } from '../../app/ports/pair-network.js';
import { networkModeFor, type NetworkChoice } from '../../core/pair-network.js';
import { demultiplex } from './demux.js';
import { engineProductOf, engineRuntimesOf } from './engine-probe.js';
import { statusOf, toEngineError, engineMessageOf } from './engine-error.js';

const REMOVE_RETRY_MS = 100;
const REMOVE_RETRY_LIMIT = 100;

/** Buffer of each demultiplexed stream (docs/benchmarks.md, logs). */
const SPLIT_HIGH_WATER_MARK_BYTES = 256 * 1024;
/** Events dockerd keeps in memory (moby's eventsLimit): a replay this long may have lost its oldest events. */
const ENGINE_EVENT_BUFFER = 256;
/** How often a waiting pair's container is inspected, and how long one such inspect may take. */
const HEARTBEAT_MS = 2_000;
const HEARTBEAT_TIMEOUT_MS = 5_000;
/**
 * A stopped container whose wait has not answered within this long: the wait's connection is dead (a dockerd that
 * restarted between two heartbeats). Generous, so a busy engine's late answer is never taken for a lost one.
 */
const SILENT_WAIT_GRACE_MS = 10_000;
const DEFAULT_CALL_TIMEOUT_MS = 60_000;
/** A container's changes list past these is not waited for nor read: the sessions are copied out instead. */
const CHANGES_TIMEOUT_MS = 5_000;
const CHANGES_MAX_BYTES = 8 * 2 ** 20;
/** Starting may run OCI hooks (the NVIDIA one enumerates GPUs): allow it longer. */
const START_TIMEOUT_MS = 180_000;

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Sleeps `ms`, or less when the signal aborts first. */
function abortableSleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

function isAbort(err: unknown): boolean {
  const e = err as { name?: string; code?: string };
  return e?.name === 'AbortError' || e?.code === 'ABORT_ERR';
}

/** Options for connecting: default is DOCKER_HOST or /var/run/docker.sock. */
export type DockerConnection = Docker.DockerOptions;

/** ContainerRuntime over the Docker Engine API (dockerode). Every engine error is mapped once, here. */
/**
 * The engine's own copy of a pair's raw (unredacted) output: always the local json-file driver, whatever the
 * daemon's default (journald, syslog or a remote service would keep or ship it beyond the container). The copy
 * lives under the engine's data root and is deleted with the container, whose removal we verify. It must be a
 * driver the logs API can read back: a resumed supervisor re-reads it from the start and
 * skips what stdout.log already holds. Bounded: 4 files of 512 MiB (JSON-framed lines); a pair whose output
 * outgrows that and is reattached after a supervisor crash loses the rotated-away start (docs/secrets.md).
 */
export const PAIR_LOG_CONFIG = {
  type: 'json-file',
  config: { 'max-size': '512m', 'max-file': '4' },
} as const;

/** The engine's HostConfig fields for a pair's limits. */
export function hostConfigLimits(
  limits: ContainerLimits,
): Pick<Docker.HostConfig, 'PidsLimit' | 'Memory' | 'MemorySwap' | 'NanoCpus' | 'Ulimits'> {
  return {
    PidsLimit: limits.pidsLimit,
    Memory: limits.memoryBytes,
    MemorySwap: limits.memorySwapBytes,
    ...(limits.nanoCpus !== undefined ? { NanoCpus: limits.nanoCpus } : {}),
    Ulimits: limits.ulimits.map((u) => ({ Name: u.name, Soft: u.soft, Hard: u.hard })),
  };
}

export class DockerContainerRuntime implements ContainerRuntime {
  readonly docker: Docker;
  readonly #callTimeoutMs: number;
  readonly #heartbeatMs: number;
  readonly #silentWaitGraceMs: number;
  readonly #changesTimeoutMs: number;
  readonly #changesMaxBytes: number;
  readonly #pairNetwork: PairNetworkGuard | null;

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
    } = {},
  ) {
    this.docker = connection instanceof Docker ? connection : new Docker(connection);
    this.#callTimeoutMs = options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    this.#heartbeatMs = options.heartbeatMs ?? HEARTBEAT_MS;
    this.#silentWaitGraceMs = options.silentWaitGraceMs ?? SILENT_WAIT_GRACE_MS;
    this.#changesTimeoutMs = options.changesTimeoutMs ?? CHANGES_TIMEOUT_MS;
    this.#changesMaxBytes = options.changesMaxBytes ?? CHANGES_MAX_BYTES;
    this.#pairNetwork = options.pairNetwork ?? null;
  }

  /**
   * The NetworkMode of a container on `choice`: "none", or the guarded pairs network once its rules are in place
   * (ensured on every call: a pair never starts on it unguarded). A guard that cannot be ensured is an EngineError, so
   * the pair fails closed before any container exists (infrastructure_failure, the reason in `engine_error`).
   */
  async networkMode(choice: NetworkChoice): Promise<string> {
    if (choice === 'none') return 'none';
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

  #deadline(ms = this.#callTimeoutMs): { abortSignal: AbortSignal } {
    return { abortSignal: AbortSignal.timeout(ms) };
  }

  async info(): Promise<EngineInfo> {
    try {
      const [info, version] = await Promise.all([
        this.docker.info() as Promise<{
          ID?: string;
          Runtimes?: Record<string, unknown>;
          LoggingDriver?: string;
          DockerRootDir?: string;
        }>,
        this.docker.version(),
      ]);
      const runtimes = info.Runtimes ? Object.keys(info.Runtimes) : [];
      return {
        id: info.ID ?? '',
        ...engineProductOf(version),
        apiVersion: version.ApiVersion,
        runtimes,
        runtimeDetails: engineRuntimesOf(info.Runtimes),
        loggingDriver: info.LoggingDriver,
        dataRoot: info.DockerRootDir,
      };
    } catch (err) {
      throw toEngineError(err, 'query the engine');
    }
  }

  async imageExists(image: string): Promise<boolean> {
    try {
      await this.docker.getImage(image).inspect();
      return true;
    } catch (err) {
      if (statusOf(err) === 404) return false;
      throw toEngineError(err, 'inspect an image', image);
    }
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
    const networkMode = await this.networkMode(spec.network ?? 'bridge');
    const portKeys = spec.ports.map((p) => `${p}/tcp`);
    const options: Docker.ContainerCreateOptions = {
      name: spec.name,
      Image: spec.image,
      Cmd: [...spec.cmd],
      WorkingDir: spec.workingDir,
      Env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`),
      Labels: { ...spec.labels },
      Tty: false,
      OpenStdin: false,
      AttachStdout: true,
      AttachStderr: true,
      StopTimeout: spec.stopTimeoutSec,
      ExposedPorts: Object.fromEntries(portKeys.map((k) => [k, {}])),
      HostConfig: {
        NetworkMode: networkMode,
        ...(spec.runtime !== undefined ? { Runtime: spec.runtime } : {}),
        // Mounts, not Binds strings: a path may contain ':' and a missing source is an error, never created as root.
        Mounts: spec.binds.map((b) => ({
          Type: 'bind' as const,
          Source: b.hostPath,
          Target: b.containerPath,
          ReadOnly: b.readOnly,
        })),
        PortBindings: Object.fromEntries(
          spec.ports.map((p) => [`${p}/tcp`, [{ HostIp: spec.bindAddress, HostPort: String(p) }]]),
        ),
        Init: true,
        SecurityOpt: ['no-new-privileges'],
        // Every capability dropped but the few a pair needs (docs/spec.md 5.1), whatever the limits say.
        CapDrop: ['ALL'],
        CapAdd: [...PAIR_CAPABILITIES],
        ...(spec.limits !== undefined ? hostConfigLimits(spec.limits) : {}),
        LogConfig: { Type: PAIR_LOG_CONFIG.type, Config: { ...PAIR_LOG_CONFIG.config } },
        AutoRemove: false,
        DeviceRequests: spec.deviceRequests.map((r) => ({
          Driver: r.Driver,
          ...(r.Count !== undefined ? { Count: r.Count } : {}),
          ...(r.DeviceIDs !== undefined ? { DeviceIDs: [...r.DeviceIDs] } : {}),
          Capabilities: r.Capabilities.map((c) => [...c]),
        })),
      },
    };
    try {
      const container = await this.docker.createContainer({ ...options, ...this.#deadline() });
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

  async wait(id: string, options: { deadlineMs: number; signal?: AbortSignal }): Promise<WaitResult> {
    const controller = new AbortController();
    const onAbort = (): void => controller.abort();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    const never = new Promise<WaitResult>(() => undefined);
    let timer: NodeJS.Timeout | undefined;
    let lastSeenAliveMs = Date.now();
    const deadline = new Promise<WaitResult>((resolve) => {
      const delay = Math.max(0, options.deadlineMs - Date.now());
      timer = setTimeout(() => {
        resolve({ kind: 'deadline' });
        controller.abort();
      }, delay);
    });
    const aborted = new Promise<WaitResult>((resolve) => {
      if (options.signal?.aborted) resolve({ kind: 'aborted' });
      options.signal?.addEventListener('abort', () => resolve({ kind: 'aborted' }), { once: true });
    });
    const exited = (async (): Promise<WaitResult> => {
      try {
        const r = (await this.docker.getContainer(id).wait({ abortSignal: controller.signal } as object)) as {
          StatusCode: number;
        };
        return { kind: 'exited', exitCode: r.StatusCode };
      } catch (err) {
        if (isAbort(err) || controller.signal.aborted) return never;
        const mapped = toEngineError(err, 'wait for a container');
        // A dropped connection or a container the engine forgot is not a verdict: the caller inspects again.
        if (mapped.fault === 'engine_unavailable' || mapped.statusCode === 404)
          return { kind: 'engine_lost', lastSeenAliveMs };
        throw mapped;
      }
    })();
    // The wait request can hang forever when dockerd dies (its chunked response is cut without an error): a
    // heartbeat inspect notices the engine going away, and an exit the wait did not report.
    const heartbeat = (async (): Promise<WaitResult> => {
      for (;;) {
        await abortableSleep(this.#heartbeatMs, controller.signal);
        if (controller.signal.aborted) return never;
        const askedAt = Date.now();
        const seen = await this.#heartbeat(id);
        if (controller.signal.aborted) return never;
        if (seen === 'alive') lastSeenAliveMs = askedAt;
        else if (seen === 'stopped') {
          // An ordinary exit is reported by the wait within moments; one that stays silent lost its connection.
          await abortableSleep(this.#silentWaitGraceMs, controller.signal);
          return controller.signal.aborted ? never : { kind: 'engine_lost', lastSeenAliveMs };
        } else if (seen === 'lost') return { kind: 'engine_lost', lastSeenAliveMs };
      }
    })();
    try {
      return await Promise.race([exited, heartbeat, deadline, aborted]);
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      controller.abort();
    }
  }

  /** One short inspect: is the container alive, stopped, or is the engine (or the container) gone? */
  async #heartbeat(id: string): Promise<'alive' | 'stopped' | 'lost' | 'unknown'> {
    try {
      const c = await this.docker
        .getContainer(id)
        .inspect({ abortSignal: AbortSignal.timeout(HEARTBEAT_TIMEOUT_MS) });
      const status = c.State.Status;
      return status === 'exited' || status === 'dead' || status === 'removing' ? 'stopped' : 'alive';
    } catch (err) {
      if (statusOf(err) === 404) return 'lost';
      // A slow answer from a busy engine is not a lost engine: only a refused or reset connection is.
      return toEngineError(err, 'inspect a container').fault === 'engine_unavailable' ? 'lost' : 'unknown';
    }
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

  async inspect(id: string): Promise<ContainerState | null> {
    try {
      const c = await this.docker.getContainer(id).inspect(this.#deadline());
      return {
        id: c.Id,
        status: c.State.Status as ContainerStatus,
        exitCode: c.State.Status === 'exited' || c.State.Status === 'dead' ? c.State.ExitCode : null,
        oomKilled: c.State.OOMKilled,
        startedAt: c.State.StartedAt && !c.State.StartedAt.startsWith('0001') ? c.State.StartedAt : null,
        finishedAt: c.State.FinishedAt && !c.State.FinishedAt.startsWith('0001') ? c.State.FinishedAt : null,
        labels: c.Config.Labels ?? {},
      };
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw toEngineError(err, 'inspect a container');
    }
  }

  async gpuGrantOf(id: string): Promise<GpuGrant | null> {
    try {
      const c = (await this.docker.getContainer(id).inspect(this.#deadline())) as {
        HostConfig?: { DeviceRequests?: unknown[] | null; Devices?: { PathOnHost?: string }[] | null };
      };
      const requests = Array.isArray(c.HostConfig?.DeviceRequests) ? c.HostConfig.DeviceRequests.length : 0;
      const devices = Array.isArray(c.HostConfig?.Devices) ? c.HostConfig.Devices : [];
      return {
        deviceRequests: requests,
        cdiDevices: devices.filter((d) => CDI_DEVICE_NAME.test(d.PathOnHost ?? '')).length,
      };
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw toEngineError(err, 'inspect a container');
    }
  }

  async writableLayerBytes(id: string): Promise<number | null> {
    try {
      const c = (await this.docker
        .getContainer(id)
        .inspect({ size: true, ...this.#deadline() } as object)) as { SizeRw?: number };
      return typeof c.SizeRw === 'number' && c.SizeRw >= 0 ? c.SizeRw : 0;
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw toEngineError(err, "measure a container's writable layer");
    }
  }

  async environmentOf(id: string): Promise<Record<string, string> | null> {
    try {
      const c = await this.docker.getContainer(id).inspect(this.#deadline());
      const env: Record<string, string> = {};
      for (const entry of c.Config.Env ?? []) {
        const at = entry.indexOf('=');
        if (at > 0) env[entry.slice(0, at)] = entry.slice(at + 1);
      }
      return env;
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw toEngineError(err, 'inspect a container');
    }
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
   * CHANGES_MAX_BYTES and CHANGES_TIMEOUT_MS; past either it is an error (the caller then copies as usual).
   */
  async filesystemChanges(id: string): Promise<FilesystemChanges | null> {
    try {
      const abortSignal = AbortSignal.timeout(this.#changesTimeoutMs);
      const [c, changes] = await Promise.all([
        this.docker.getContainer(id).inspect(this.#deadline()),
        this.#changesList(id, abortSignal),
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

  async #changesList(id: string, abortSignal: AbortSignal): Promise<{ Path: string }[] | null> {
    const stream = await new Promise<Readable>((resolve, reject) => {
      this.docker.modem.dial(
        {
          path: `/containers/${encodeURIComponent(id)}/changes`,
          method: 'GET',
          isStream: true,
          abortSignal,
          statusCodes: { 200: true, 404: 'no such container', 500: 'server error' },
        },
        (err: Error | null, data: unknown) => (err ? reject(err) : resolve(data as Readable)),
      );
    });
    const chunks: Buffer[] = [];
    let bytes = 0;
    try {
      for await (const chunk of stream) {
        bytes += (chunk as Buffer).length;
        if (bytes > this.#changesMaxBytes)
          throw new Error(`the changes list is over ${this.#changesMaxBytes} bytes`);
        chunks.push(chunk as Buffer);
      }
    } finally {
      stream.destroy();
    }
    return JSON.parse(Buffer.concat(chunks).toString('utf8')) as { Path: string }[] | null;
  }

  async listByLabel(labels: Readonly<Record<string, string>>): Promise<ContainerState[]> {
    try {
      const list = await this.docker.listContainers({
        ...this.#deadline(),
        all: true,
        filters: { label: Object.entries(labels).map(([k, v]) => (v === '' ? k : `${k}=${v}`)) },
      });
      return list.map((c) => ({
        id: c.Id,
        status: c.State as ContainerStatus,
        exitCode: null,
        oomKilled: false,
        startedAt: null,
        finishedAt: null,
        labels: c.Labels ?? {},
      }));
    } catch (err) {
      throw toEngineError(err, 'list containers');
    }
  }

  async containerEventsSince(
    id: string,
    sinceMs: number,
  ): Promise<{ actions: readonly string[]; complete: boolean }> {
    try {
      // With `until` the engine replays what it buffered and ends the stream. Unfiltered, to count the buffer.
      const stream = (await this.docker.getEvents({
        since: Math.floor(sinceMs / 1000),
        until: Math.ceil(Date.now() / 1000),
        ...this.#deadline(),
      } as Docker.GetEventsOptions)) as unknown as Readable;
      let text = '';
      for await (const chunk of stream) text += String(chunk);
      const events = text
        .split('\n')
        .filter((line) => line.trim() !== '')
        .map((line) => JSON.parse(line) as { Type?: string; Action?: string; Actor?: { ID?: string } });
      const actions = events
        .filter((e) => e.Type === 'container' && e.Actor?.ID === id && typeof e.Action === 'string')
        .map((e) => e.Action as string);
      // Oldest events are dropped first: fewer than a full buffer since `sinceMs` means none of those was dropped.
      return { actions, complete: events.length < ENGINE_EVENT_BUFFER };
    } catch (err) {
      throw toEngineError(err, 'read engine events');
    }
  }
}
