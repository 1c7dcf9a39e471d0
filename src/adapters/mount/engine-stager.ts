import { createHash } from 'node:crypto';
import { ProcFdMountStager } from './proc-fd-stager.js';

/** Where this host's staging points live: root-only, one folder per engine (a sweep asks only its own engine). */
export const STAGING_ROOT = '/run/roboguide-eval/mounts';

const stagers = new Map<string, ProcFdMountStager>();

/**
 * The mount stager of the engine DOCKER_HOST names (the local socket when unset), one per process and engine, so
 * that pairs and sessions of one process share its record of points in flight.
 */
export function engineMountStager(
  environment: Readonly<Record<string, string | undefined>> = process.env,
): ProcFdMountStager {
  const endpoint = environment['DOCKER_HOST'] ?? '';
  const key = createHash('sha256')
    .update(endpoint === '' ? 'default' : endpoint)
    .digest('hex')
    .slice(0, 16);
  let stager = stagers.get(key);
  if (stager === undefined) {
    stager = new ProcFdMountStager({ root: `${STAGING_ROOT}/${key}`, referencedSources: engineBindSources });
    stagers.set(key, stager);
  }
  return stager;
}

/** The bind sources of every container the engine has, in any state (loaded on first use: dockerode is heavy). */
async function engineBindSources(): Promise<ReadonlySet<string>> {
  const { Dockerode } = await import('../docker/dockerode.js');
  const containers = await new Dockerode().listContainers({ all: true });
  return new Set(containers.flatMap((c) => (c.Mounts ?? []).map((m) => m.Source)));
}
