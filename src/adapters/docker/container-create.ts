import type Docker from 'dockerode';
import type { ContainerBase } from '../../app/ports/container-runtime.js';
import { PAIR_CAPABILITIES, type ContainerLimits } from '../../core/pair-limits.js';

/**
 * The engine's own copy of a pair's raw (unredacted) output: always the local json-file driver, whatever
 * the daemon's default (journald, syslog or a remote service would keep or ship it beyond the container).
 * The copy lives under the engine's data root and is deleted with the container, whose removal we verify.
 * It must be a driver the logs API can read back: a resumed supervisor re-reads it from the start and
 * skips what stdout.log already holds. Bounded: 4 files of 512 MiB (JSON-framed lines); a pair whose
 * output outgrows that and is reattached after a supervisor crash loses the rotated-away start
 * (docs/secrets.md). Not Docker's `local` driver, though it costs the engine a fifth less time per byte: on engine
 * 20.10 its logs API drops the newline of every line over 16 KiB (the engine splits those into partial messages),
 * so a reattach would find the engine's copy differing (measured; test/integration/log-config.int.test.ts).
 */
export const PAIR_LOG_CONFIG = {
  type: 'json-file',
  config: { 'max-size': '512m', 'max-file': '4' },
} as const;

/** The engine's HostConfig fields for a container's limits. */
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

/** What differs between a pair's container and a session's: added to, or put over, the shared options. */
export interface CreateExtras {
  /** Config fields beyond the shared ones (command, working directory, user, attach flags). */
  readonly config: Omit<Docker.ContainerCreateOptions, 'HostConfig'>;
  /** HostConfig fields put after the shared ones, before the limits (a session's CPU, memory, hosts). */
  readonly hostConfig?: Docker.HostConfig;
  /** The capabilities kept (all others dropped); absent: a pair's set (docs/spec.md 5.1). */
  readonly capabilities?: readonly string[] | undefined;
  /** Our seccomp profile as the engine takes it (`EngineSeccompOption`: the JSON on Docker, a file's path on Podman). */
  readonly seccomp: string;
}

/**
 * The one place a container's create options are built, a pair's and a session's: name, image,
 * environment, labels, ports, then the HostConfig every container of ours gets (network, runtime, bind
 * mounts, init, no new privileges, our seccomp profile, every capability dropped but a few, the limits, the GPU requests).
 * `networkMode` is the network already ensured (DockerContainerRuntime.networkMode).
 */
export function createOptions(
  spec: ContainerBase,
  networkMode: string,
  extras: CreateExtras,
): Docker.ContainerCreateOptions {
  return {
    name: spec.name,
    Image: spec.image,
    Env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`),
    Labels: { ...spec.labels },
    Tty: false,
    StopTimeout: spec.stopTimeoutSec,
    ExposedPorts: Object.fromEntries(spec.ports.map((p) => [`${p}/tcp`, {}])),
    // The container's own field: every engine API version takes it (from 1.44 it is moved to the one network's).
    ...(spec.macAddress !== undefined ? { MacAddress: spec.macAddress } : {}),
    ...extras.config,
    HostConfig: {
      NetworkMode: networkMode,
      ...(spec.dns !== undefined ? { Dns: [...spec.dns] } : {}),
      ...(spec.runtime !== undefined ? { Runtime: spec.runtime } : {}),
      // Mounts, not Binds strings: a path may contain ':', and a missing source is an error (never created).
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
      // Our seccomp profile in place of the engine's: no setuid/setgid mode, no device node, no user namespace,
      // no io_uring, whatever the capabilities (src/core/seccomp-profile.ts, docs/secrets.md "host privilege").
      SecurityOpt: ['no-new-privileges', extras.seccomp],
      // Every capability dropped but the few a container needs (docs/spec.md 5.1), whatever the limits say.
      CapDrop: ['ALL'],
      CapAdd: [...(extras.capabilities ?? PAIR_CAPABILITIES)],
      AutoRemove: false,
      ...extras.hostConfig,
      ...(spec.limits !== undefined ? hostConfigLimits(spec.limits) : {}),
      DeviceRequests: spec.deviceRequests.map((r) => ({
        Driver: r.Driver,
        ...(r.Count !== undefined ? { Count: r.Count } : {}),
        ...(r.DeviceIDs !== undefined ? { DeviceIDs: [...r.DeviceIDs] } : {}),
        Capabilities: r.Capabilities.map((c) => [...c]),
      })),
    },
  };
}

/**
 * A create's options as dockerode's `createContainer` takes them, sent as the Engine API has them: the name (and a
 * platform) in the query string, the configuration alone in the body. Given plain options, docker-modem sends them both ways: the
 * whole configuration URL-encoded into the request line as well as in the body (`buildQuerystring(opts._query ||
 * opts)`), about 25 KB with our seccomp profile encoded twice, and every environment value in it, a pair's secrets
 * among them. The engine reads only `name` and `platform` there; a proxy in front of it may log a request line, or refuse one that
 * long (414). `_query` and `_body` are docker-modem's own fields for the two parts.
 */
export function createRequest(
  options: Docker.ContainerCreateOptions,
  abortSignal: AbortSignal,
): Docker.ContainerCreateOptions {
  // The query's own parameters (`name`, `platform`) there, everything else in the body.
  const { name, platform, ...body } = options;
  const request = {
    _query: { ...(name !== undefined ? { name } : {}), ...(platform !== undefined ? { platform } : {}) },
    _body: body,
    abortSignal,
  };
  return request;
}
