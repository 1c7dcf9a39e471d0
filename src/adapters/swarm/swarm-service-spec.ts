import type Docker from 'dockerode';
import type { ContainerSpec } from '../../app/ports/container-runtime.js';
import { EngineError } from '../../app/ports/engine-error.js';
import { PAIR_LOG_CONFIG } from '../docker/container-create.js';
import { SWARM_GPU_RESOURCE } from './node-constraints.js';

/** The service label that records the pair's volumes (a later process finds them there). */
export const MOUNTS_LABEL = 'roboguide.mounts';

/** A volume that stands for one of the spec's binds on the node (no shared file system is assumed). */
export interface MountRecord {
  readonly volume: string;
  readonly target: string;
  readonly hostPath: string;
  /** Copied back into `hostPath` after the pair (the outcome folder). */
  readonly collect: boolean;
}

/** One volume per bind, named after the pair (`NAME-m0`, `NAME-m1`…). */
export function mountsOf(spec: ContainerSpec): MountRecord[] {
  return spec.binds.map((b, i) => ({
    volume: `${spec.name}-m${i}`,
    target: b.containerPath,
    hostPath: b.hostPath,
    collect: b.collect === true,
  }));
}

/**
 * The service of one pair: replicas 1, restart condition none, init, our labels on service and container, a volume
 * per bind, GPUs as generic resources, the job's placement, published ports in host mode. A swarm service cannot
 * choose its OCI runtime: a pair that asked for another than runc (gVisor) is refused, never run under runc.
 */
export function serviceSpecOf(
  spec: ContainerSpec,
  mounts: readonly MountRecord[],
): Docker.CreateServiceOptions {
  if (spec.runtime !== undefined && spec.runtime !== 'runc') {
    const message = `runtime "${spec.runtime}" cannot be chosen for a swarm service (only "runc")`;
    throw new EngineError('engine_error', message, { statusCode: null, engineMessage: message });
  }
  const gpus = gpuCountOf(spec);
  const serviceSpec = {
    Name: spec.name,
    Labels: { ...spec.labels, [MOUNTS_LABEL]: JSON.stringify(mounts) },
    TaskTemplate: {
      ContainerSpec: {
        Image: spec.image,
        Args: [...spec.cmd],
        Dir: spec.workingDir,
        Env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`),
        Labels: { ...spec.labels },
        Init: true,
        StopGracePeriod: spec.stopTimeoutSec * 1e9,
        Mounts: mounts.map((m) => ({
          Type: 'volume',
          Source: m.volume,
          Target: m.target,
          ReadOnly: false,
          VolumeOptions: { Labels: { ...spec.labels } },
        })),
      },
      RestartPolicy: { Condition: 'none', MaxAttempts: 0 },
      Resources:
        gpus > 0
          ? {
              Reservations: {
                GenericResources: [{ DiscreteResourceSpec: { Kind: SWARM_GPU_RESOURCE, Value: gpus } }],
              },
            }
          : {},
      Placement: { Constraints: [...(spec.placement ?? [])] },
      LogDriver: { Name: PAIR_LOG_CONFIG.type, Options: { ...PAIR_LOG_CONFIG.config } },
    },
    Mode: { Replicated: { Replicas: 1 } },
    EndpointSpec: {
      Ports: spec.ports.map((p) => ({
        Protocol: 'tcp',
        TargetPort: p,
        PublishedPort: p,
        PublishMode: 'host',
      })),
    },
  };
  return serviceSpec as unknown as Docker.CreateServiceOptions;
}

/** GPUs as generic resources: a count, or the number of listed ids (ids cannot be chosen on a swarm); "all" has no meaning there. */
export function gpuCountOf(spec: Pick<ContainerSpec, 'deviceRequests'>): number {
  let count = 0;
  for (const r of spec.deviceRequests) {
    if (r.DeviceIDs !== undefined) count += r.DeviceIDs.length;
    else if (r.Count !== undefined && r.Count > 0) count += r.Count;
    else
      throw new EngineError(
        'engine_error',
        'gpus "all" cannot be placed on a swarm: give the job a GPU count',
        {
          statusCode: null,
          engineMessage: 'gpus all on swarm',
        },
      );
  }
  return count;
}
