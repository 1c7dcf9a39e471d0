import type { EngineInfo } from '../ports/container-runtime.js';
import { ok, warn, fail, type DoctorCheck } from './check.js';
import { CDI_SPEC_DIRS, type DoctorDeps } from '../ports/doctor-probes.js';

/**
 * What `doctor` checks when the engine behind the Docker API is Podman (issue 28, docs/podman.md), kept apart from
 * the Docker checks: its container-init (pairs run with `Init: true`), its log driver answer (Podman reports none
 * over the Docker API) and GPUs (Podman drops Docker's DeviceRequests; it serves GPUs only through CDI).
 */

/** Where Podman looks for catatonit when containers.conf names no `init_path` (Debian, Fedora, a local build). */
export const PODMAN_INIT_PATHS: readonly string[] = [
  '/usr/libexec/podman/catatonit',
  '/usr/lib/podman/catatonit',
  '/usr/local/libexec/podman/catatonit',
];
export const isPodman = (info: EngineInfo): boolean => info.product === 'podman';

/** The Podman checks, in the place of the Docker `nvidia runtime` and `log driver` lines. */
export async function podmanChecks(deps: DoctorDeps, info: EngineInfo): Promise<DoctorCheck[]> {
  return [await podmanInitCheck(deps), podmanLogDriverCheck(info), await podmanGpuCheck(deps)];
}

async function podmanInitCheck(deps: DoctorDeps): Promise<DoctorCheck> {
  const name = 'podman init';
  const fix =
    'install catatonit (Debian: apt-get install catatonit), or set init_path in containers.conf ([containers] init_path = "/usr/bin/tini")';
  const configured = (await deps.podmanHost?.initPath().catch(() => null)) ?? null;
  if (configured !== null) {
    return (await deps.fileExists(configured))
      ? ok(name, `init_path ${configured} (containers.conf): pairs run with Init: true`)
      : fail(
          name,
          `containers.conf init_path ${configured} does not exist: every pair fails at its start (Init: true)`,
          fix,
        );
  }
  for (const path of PODMAN_INIT_PATHS) {
    if (await deps.fileExists(path)) return ok(name, `catatonit at ${path}: pairs run with Init: true`);
  }
  return fail(
    name,
    `no catatonit (${PODMAN_INIT_PATHS.join(', ')}) and no init_path in containers.conf: every pair fails at its start ("container-init binary not found on the host")`,
    fix,
  );
}

function podmanLogDriverCheck(info: EngineInfo): DoctorCheck {
  const driver =
    info.loggingDriver === undefined || info.loggingDriver === ''
      ? 'not reported over the Docker API (containers.conf log_driver: k8s-file, or journald where systemd runs)'
      : info.loggingDriver;
  return ok(
    'log driver',
    `Podman's default ${driver}; pair containers set json-file explicitly, which Podman keeps as its own file log under its storage, deleted with the container`,
  );
}

async function podmanGpuCheck(deps: DoctorDeps): Promise<DoctorCheck> {
  const name = 'podman gpus';
  const specs = (await deps.podmanHost?.cdiSpecs().catch(() => [])) ?? [];
  const dropped =
    'Podman drops Docker GPU device requests: a job with "gpus" fails before its driver runs (gpu_request_dropped)';
  if (specs.length === 0) {
    return warn(
      name,
      `${dropped}; no CDI spec in ${CDI_SPEC_DIRS.join(' or ')}`,
      'GPU jobs need Docker with nvidia-container-toolkit; see docs/podman.md',
    );
  }
  return warn(
    name,
    `${dropped}; CDI specs found (${specs.join(', ')}), but roboguide-eval does not pass CDI device names yet`,
    'run GPU jobs on Docker with nvidia-container-toolkit; see docs/podman.md',
  );
}
