import { EngineError } from '../ports/engine-error.js';
import { PAIR_DRIVER_IMAGE } from '../../core/synthetic-images.js';
import { probeGpuView } from '../gpu-probe.js';
import { isPodman, podmanChecks } from './podman-checks.js';
import type { EngineInfo } from '../ports/container-runtime.js';
import { fail, ok, warn, type DoctorCheck } from './check.js';
import type { DoctorDeps } from '../ports/doctor-probes.js';
import type { DoctorOptions } from './doctor-options.js';

export const PROBE_DEADLINE_MS = 30_000;
export const PROBE_LABELS: Readonly<Record<string, string>> = { 'roboguide.doctor': 'probe' };
/** HostConfig.DeviceRequests appeared in Engine API 1.40 (Docker 19.03). */
const DEVICE_REQUESTS_MIN_API = [1, 40] as const;
/** The fix for a missing synthetic image, in the command the user runs. */
const imagesBuildFix = (options: Pick<DoctorOptions, 'bin'>): string =>
  `${options.bin ?? 'roboguide-eval'} images build`;
const GPU_DROPPED_FIX =
  'on Docker: install nvidia-container-toolkit and configure the runtime; on Podman: GPUs need CDI (docs/podman.md), Docker device requests are dropped';
const NVIDIA_FIX =
  'install nvidia-container-toolkit, run `nvidia-ctk runtime configure --runtime=docker`, restart dockerd';

/** `engineInfo`: the one `info()` call of the run, shared with the host checks (they read the data root from it). */
export async function engineChecks(
  deps: DoctorDeps,
  options: DoctorOptions,
  engineInfo: Promise<EngineInfo>,
): Promise<{ checks: DoctorCheck[]; reachable: boolean }> {
  let info: EngineInfo;
  try {
    info = await engineInfo;
  } catch (err) {
    const unreachable = !(err instanceof EngineError) || err.fault === 'engine_unavailable';
    const detail = engineErrorDetail(err);
    const skipped = [
      ...options.images.map(imageName),
      'nvidia runtime',
      'log driver',
      ...(options.probeGpu ? ['gpu probe'] : []),
    ].map((name) => warn(name, 'not checked: the engine check failed', 'fix the engine first'));
    const fix = unreachable
      ? 'start dockerd (or check DOCKER_HOST and the socket permissions)'
      : 'check the engine log (journalctl -u docker)';
    return { checks: [fail('engine', detail, fix), ...skipped], reachable: !unreachable };
  }
  const checks: DoctorCheck[] = [engineCheck(info)];
  for (const image of options.images) checks.push(await imageCheck(deps, image, options));
  // Podman behind the Docker API: its own checks in place of the Docker runtime and log driver lines (podman-checks.ts).
  if (isPodman(info)) checks.push(...(await podmanChecks(deps, info)));
  else checks.push(nvidiaRuntimeCheck(info), logDriverCheck(info));
  if (options.probeGpu) checks.push(await gpuProbe(deps, options.images[0] ?? PAIR_DRIVER_IMAGE, options));
  return { checks, reachable: true };
}

function engineCheck(info: EngineInfo): DoctorCheck {
  const detail = `${isPodman(info) ? 'Podman' : 'Docker'} ${info.version}, API ${info.apiVersion}${info.id ? `, id ${info.id.slice(0, 14)}` : ''}`;
  const [major = 0, minor = 0] = info.apiVersion.split('.').map(Number);
  const [minMajor, minMinor] = DEVICE_REQUESTS_MIN_API;
  if (major < minMajor || (major === minMajor && minor < minMinor)) {
    return warn(
      'engine',
      `${detail}; GPU device requests need API >= ${minMajor}.${minMinor}`,
      'upgrade the Docker engine to 19.03 or later',
    );
  }
  return ok('engine', detail);
}

const imageName = (image: string): string => `image ${image}`;

async function imageCheck(
  deps: DoctorDeps,
  image: string,
  options: Pick<DoctorOptions, 'bin'>,
): Promise<DoctorCheck> {
  try {
    if (await deps.runtime.imageExists(image)) return ok(imageName(image), 'present');
  } catch (err) {
    return fail(imageName(image), (err as Error).message, 'check the engine log');
  }
  const fix = image.startsWith('roboguide/')
    ? imagesBuildFix(options)
    : `docker build -t ${image} … or docker load -i … (nothing can be pulled here)`;
  return warn(imageName(image), 'missing: jobs using it will fail with image_missing', fix);
}

/** Drivers that keep container output on this host, in files deleted with the container (or nowhere). */
const LOCAL_LOG_DRIVERS: ReadonlySet<string> = new Set(['json-file', 'local', 'none']);
/** Drivers known to ship output to a system or remote log (journald, syslog, gelf, fluentd, cloud services…). */
export const OFF_HOST_LOG_DRIVERS: ReadonlySet<string> = new Set([
  'journald',
  'syslog',
  'gelf',
  'fluentd',
  'awslogs',
  'splunk',
  'gcplogs',
  'etwlogs',
  'logentries',
]);

function logDriverCheck(info: EngineInfo): DoctorCheck {
  const name = 'log driver';
  const pairs =
    "pair containers set json-file explicitly (raw output stays under the engine's data root and is deleted with the container)";
  const fix =
    'set "log-driver": "json-file" in /etc/docker/daemon.json (then restart dockerd) so that other containers keep their output local too';
  const driver = info.loggingDriver;
  if (driver === undefined || driver === '')
    return warn(
      name,
      `engine default not reported; ${pairs}`,
      'check `docker info --format {{.LoggingDriver}}`',
    );
  if (LOCAL_LOG_DRIVERS.has(driver)) return ok(name, `engine default ${driver}; ${pairs}`);
  const where = OFF_HOST_LOG_DRIVERS.has(driver)
    ? 'ships container output off this host (or into a system log that outlives the container)'
    : 'is not a known local driver';
  return warn(
    name,
    `engine default ${driver} ${where}: ${pairs}, but any other container's output goes there`,
    fix,
  );
}

function nvidiaRuntimeCheck(info: EngineInfo): DoctorCheck {
  const runtimes = info.runtimes.length > 0 ? info.runtimes.join(', ') : 'none listed';
  if (info.runtimes.includes('nvidia')) return ok('nvidia runtime', `registered (runtimes: ${runtimes})`);
  return warn(
    'nvidia runtime',
    `not registered (runtimes: ${runtimes}): jobs with "gpus" will fail with nvidia_runtime_missing unless the engine has the NVIDIA hook (check with --probe-gpu)`,
    NVIDIA_FIX,
  );
}

/**
 * A container asking for `gpus: all` that prints what it sees (src/app/gpu-probe.ts): ok only when the engine kept
 * the request and the container shows the devices; always removed, whatever happened.
 */
async function gpuProbe(
  deps: DoctorDeps,
  image: string,
  options: Pick<DoctorOptions, 'bin'>,
): Promise<DoctorCheck> {
  const name = 'gpu probe';
  const { containerId, verdict } = await probeGpuView(deps, {
    name: `roboguide-doctor-probe-${deps.newId()}`,
    image,
    gpus: 'all',
    labels: PROBE_LABELS,
    timeoutMs: PROBE_DEADLINE_MS,
  });
  let check: DoctorCheck;
  switch (verdict.kind) {
    case 'shown':
      check = ok(name, `a container requesting gpus "all" (${image}): ${verdict.evidence}`);
      break;
    case 'not_shown':
      check = fail(
        name,
        `a container requesting gpus "all" (${image}) got no GPU: ${verdict.why}`,
        GPU_DROPPED_FIX,
      );
      break;
    case 'not_exited':
      check = fail(
        name,
        `probe container did not exit within ${verdict.ms} ms`,
        'check the engine and the NVIDIA hook',
      );
      break;
    case 'exit':
      check = fail(
        name,
        `probe container (${image}, sh -c …) exited ${verdict.exitCode}${verdict.output !== '' ? `: ${verdict.output.trim()}` : ''}`,
        'the probe needs a POSIX shell in the image; check the image and the NVIDIA hook',
      );
      break;
    case 'error':
      check = probeFailure(name, verdict.error, options);
  }
  return containerId === null ? check : withProbeRemoved(deps, containerId, check);
}

function probeFailure(name: string, err: unknown, options: Pick<DoctorOptions, 'bin'>): DoctorCheck {
  if (err instanceof EngineError && err.fault === 'nvidia_runtime_missing')
    return fail(name, err.engineMessage, NVIDIA_FIX);
  if (err instanceof EngineError && err.fault === 'image_missing')
    return fail(name, err.message, imagesBuildFix(options));
  return fail(name, err instanceof Error ? err.message : String(err), 'check the engine log');
}

/** The probe container removed and its absence verified; a failure of either turns `check` into a fail. */
export async function withProbeRemoved(
  deps: DoctorDeps,
  id: string,
  check: DoctorCheck,
): Promise<DoctorCheck> {
  try {
    await deps.runtime.remove(id);
    if ((await deps.runtime.inspect(id)) === null) return check;
    return fail(
      check.name,
      `${check.detail}; probe container ${id.slice(0, 12)} still exists after removal`,
      `docker rm -f ${id.slice(0, 12)}`,
    );
  } catch (err) {
    return fail(
      check.name,
      `${check.detail}; removing probe container ${id.slice(0, 12)} failed: ${(err as Error).message}`,
      `docker rm -f ${id.slice(0, 12)}`,
    );
  }
}

/** An error's message, with the engine's own message after it when the engine said something else. */
export function engineErrorDetail(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return err instanceof EngineError && err.engineMessage !== message
    ? `${message}: ${err.engineMessage}`
    : message;
}
