import type { ContainerSpec } from './ports/container-runtime.js';

/**
 * A throwaway probe container (doctor's runtime probe, the GPU probe): no network, no mounts, no ports, no
 * environment, run from /, stopped within a second. The caller removes it and checks the engine's 404.
 */
export function probeContainerSpec(
  probe: Pick<ContainerSpec, 'name' | 'image' | 'cmd' | 'labels'> &
    Partial<Pick<ContainerSpec, 'deviceRequests' | 'limits' | 'runtime'>>,
): ContainerSpec {
  return {
    workingDir: '/',
    env: {},
    binds: [],
    ports: [],
    bindAddress: '127.0.0.1',
    network: 'none',
    deviceRequests: [],
    stopTimeoutSec: 1,
    ...probe,
  };
}
