import { EngineError } from './ports/engine-error.js';
import { PAIR_DRIVER_IMAGE } from '../core/synthetic-images.js';
import { ExitCode } from '../core/errors.js';
import { outputSpaceWarning } from '../core/output-budget.js';
import { deviceRequestsFor } from '../core/gpu/device-requests.js';
import type { GpuObservation } from '../core/gpu/nvidia-smi-parse.js';
import type { ContainerRuntime, EngineInfo } from './ports/container-runtime.js';

export type CheckStatus = 'ok' | 'warn' | 'fail';

/** One line of `doctor`: `fix` says what to do when the status is not ok (null when there is nothing to do). */
export interface DoctorCheck {
  readonly name: string;
  readonly status: CheckStatus;
  readonly detail: string;
  readonly fix: string | null;
}

export type DoctorExitCode = typeof ExitCode.ok | typeof ExitCode.runtime | typeof ExitCode.engineUnavailable;

export interface DoctorReport {
  readonly checks: readonly DoctorCheck[];
  readonly engineReachable: boolean;
  readonly exitCode: DoctorExitCode;
}

/** Where the registry check writes: an explicit file (created when missing), or a throwaway temp database. */
export type RegistryTarget =
  | { readonly kind: 'file'; readonly path: string }
  | { readonly kind: 'temp' }
  /** `display`: the URL without its password; `connection` is opaque here (the probe's adapter reads it). */
  | { readonly kind: 'postgres'; readonly display: string; readonly connection: unknown };

/** What a registry probe read: the schema version the database records and the one this tool writes. */
export interface RegistryProbe {
  readonly schema: { readonly current: number; readonly supported: number } | null;
}

/** The world as `doctor` sees it; `createDoctorDeps` wires the real one, unit tests pass fakes. */
export interface DoctorDeps {
  readonly runtime: Pick<
    ContainerRuntime,
    'info' | 'imageExists' | 'create' | 'start' | 'wait' | 'remove' | 'inspect'
  >;
  readonly observeGpus: () => Promise<GpuObservation>;
  readonly fileExists: (path: string) => Promise<boolean>;
  /** Write and read back a row in a scratch table inside a transaction that is rolled back; throws when it cannot. */
  /** Proves a write (rolled back) and reads the schema version; throws when the registry cannot be reached or written. */
  readonly probeRegistry: (target: RegistryTarget) => Promise<RegistryProbe | void>;
  /** Free bytes for an unprivileged user on the filesystem holding `path` (or its nearest existing ancestor). */
  readonly freeDiskBytes: (path: string) => Promise<{ readonly path: string; readonly freeBytes: number }>;
  readonly readBootId: () => Promise<string | null>;
  readonly nowMs: () => number;
  readonly newId: () => string;
}

export interface DoctorOptions {
  /** Images that must be present locally (default: the pair-driver image). The first one runs the GPU probe. */
  readonly images: readonly string[];
  readonly probeGpu: boolean;
  /** `--registry` when given (absolute), else null. */
  readonly registryPath: string | null;
  /** `--registry` given a PostgreSQL URL: checked instead of a file. */
  readonly registryPostgres?: { readonly display: string; readonly connection: unknown };
  readonly defaultRegistryPath: string;
  /** `--output` or the working directory: the filesystem whose free space matters. */
  readonly outputDir: string;
  /** With `--manifest`: the bytes that batch's log and session caps could need on that file system. */
  readonly batchNeedBytes?: number | null;
}

export const GIB = 1024 ** 3;
export const MIB = 1024 ** 2;
export const DISK_WARN_BYTES = 5 * GIB;
export const DISK_FAIL_BYTES = 512 * MIB;
export const PROBE_DEADLINE_MS = 30_000;
export const PROBE_LABELS: Readonly<Record<string, string>> = { 'roboguide.doctor': 'probe' };
/** HostConfig.DeviceRequests appeared in Engine API 1.40 (Docker 19.03). */
const DEVICE_REQUESTS_MIN_API = [1, 40] as const;
const IMAGES_BUILD_FIX = 'npx roboguide-eval images build';
const NVIDIA_FIX =
  'install nvidia-container-toolkit, run `nvidia-ctk runtime configure --runtime=docker`, restart dockerd';

const ok = (name: string, detail: string): DoctorCheck => ({ name, status: 'ok', detail, fix: null });
const warn = (name: string, detail: string, fix: string): DoctorCheck => ({
  name,
  status: 'warn',
  detail,
  fix,
});
const fail = (name: string, detail: string, fix: string): DoctorCheck => ({
  name,
  status: 'fail',
  detail,
  fix,
});

/** The verdict: 3 when no engine answers, else 1 on any failed check, else 0 (warnings do not fail). */
export function doctorExitCode(checks: readonly DoctorCheck[], engineReachable: boolean): DoctorExitCode {
  if (!engineReachable) return ExitCode.engineUnavailable;
  return checks.some((c) => c.status === 'fail') ? ExitCode.runtime : ExitCode.ok;
}

export async function runDoctor(deps: DoctorDeps, options: DoctorOptions): Promise<DoctorReport> {
  const [engine, host] = await Promise.all([engineChecks(deps, options), hostChecks(deps, options)]);
  const checks = [...engine.checks, ...host];
  return { checks, engineReachable: engine.reachable, exitCode: doctorExitCode(checks, engine.reachable) };
}

async function engineChecks(
  deps: DoctorDeps,
  options: DoctorOptions,
): Promise<{ checks: DoctorCheck[]; reachable: boolean }> {
  let info: EngineInfo;
  try {
    info = await deps.runtime.info();
  } catch (err) {
    const unreachable = !(err instanceof EngineError) || err.fault === 'engine_unavailable';
    const message = err instanceof Error ? err.message : String(err);
    const detail =
      err instanceof EngineError && err.engineMessage !== message
        ? `${message}: ${err.engineMessage}`
        : message;
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
  for (const image of options.images) checks.push(await imageCheck(deps, image));
  checks.push(nvidiaRuntimeCheck(info));
  checks.push(logDriverCheck(info));
  if (options.probeGpu) checks.push(await gpuProbe(deps, options.images[0] ?? PAIR_DRIVER_IMAGE));
  return { checks, reachable: true };
}

function engineCheck(info: EngineInfo): DoctorCheck {
  const detail = `Docker ${info.version}, API ${info.apiVersion}${info.id ? `, id ${info.id.slice(0, 14)}` : ''}`;
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

async function imageCheck(deps: DoctorDeps, image: string): Promise<DoctorCheck> {
  try {
    if (await deps.runtime.imageExists(image)) return ok(imageName(image), 'present');
  } catch (err) {
    return fail(imageName(image), (err as Error).message, 'check the engine log');
  }
  const fix = image.startsWith('roboguide/')
    ? IMAGES_BUILD_FIX
    : `docker build -t ${image} … or docker load -i … (nothing can be pulled here)`;
  return warn(imageName(image), 'missing: jobs using it will fail with image_missing', fix);
}

/** Drivers that keep container output on this host, in files deleted with the container (or nowhere). */
const LOCAL_LOG_DRIVERS: ReadonlySet<string> = new Set(['json-file', 'local', 'none']);
/** Drivers known to ship output to a system or remote log (journald, syslog, gelf, fluentd, cloud services…). */
export const OFF_HOST_LOG_DRIVERS: ReadonlySet<string> = new Set([
  'journald', 'syslog', 'gelf', 'fluentd', 'awslogs', 'splunk', 'gcplogs', 'etwlogs', 'logentries',
]);

function logDriverCheck(info: EngineInfo): DoctorCheck {
  const name = 'log driver';
  const pairs = 'pair containers set json-file explicitly (raw output stays under the engine\'s data root and is deleted with the container)';
  const fix = 'set "log-driver": "json-file" in /etc/docker/daemon.json (then restart dockerd) so that other containers keep their output local too';
  const driver = info.loggingDriver;
  if (driver === undefined || driver === '') return warn(name, `engine default not reported; ${pairs}`, 'check `docker info --format {{.LoggingDriver}}`');
  if (LOCAL_LOG_DRIVERS.has(driver)) return ok(name, `engine default ${driver}; ${pairs}`);
  const where = OFF_HOST_LOG_DRIVERS.has(driver) ? 'ships container output off this host (or into a system log that outlives the container)' : 'is not a known local driver';
  return warn(name, `engine default ${driver} ${where}: ${pairs}, but any other container's output goes there`, fix);
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

/** A container asking for `gpus: all` that exits at once; always removed, whatever happened. */
async function gpuProbe(deps: DoctorDeps, image: string): Promise<DoctorCheck> {
  const name = 'gpu probe';
  let id: string | null = null;
  let check: DoctorCheck;
  try {
    id = (
      await deps.runtime.create({
        name: `roboguide-doctor-probe-${deps.newId()}`,
        image,
        cmd: ['true'],
        workingDir: '/',
        env: {},
        binds: [],
        ports: [],
        bindAddress: '127.0.0.1',
        deviceRequests: deviceRequestsFor('all'),
        labels: PROBE_LABELS,
        stopTimeoutSec: 1,
      })
    ).id;
    await deps.runtime.start(id);
    const waited = await deps.runtime.wait(id, { deadlineMs: deps.nowMs() + PROBE_DEADLINE_MS });
    if (waited.kind !== 'exited')
      check = fail(
        name,
        `probe container did not exit within ${PROBE_DEADLINE_MS} ms`,
        'check the engine and the NVIDIA hook',
      );
    else if (waited.exitCode !== 0)
      check = fail(
        name,
        `probe container (${image}, "true") exited ${waited.exitCode}`,
        'check the image and the NVIDIA hook',
      );
    else check = ok(name, `a container requesting gpus "all" started and exited 0 (${image})`);
  } catch (err) {
    check = probeFailure(name, err);
  }
  return id === null ? check : withProbeRemoved(deps, id, check);
}

function probeFailure(name: string, err: unknown): DoctorCheck {
  if (err instanceof EngineError && err.fault === 'nvidia_runtime_missing')
    return fail(name, err.engineMessage, NVIDIA_FIX);
  if (err instanceof EngineError && err.fault === 'image_missing')
    return fail(name, err.message, IMAGES_BUILD_FIX);
  return fail(name, err instanceof Error ? err.message : String(err), 'check the engine log');
}

async function withProbeRemoved(deps: DoctorDeps, id: string, check: DoctorCheck): Promise<DoctorCheck> {
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

async function hostChecks(deps: DoctorDeps, options: DoctorOptions): Promise<DoctorCheck[]> {
  return Promise.all([
    gpuCheck(deps),
    registryCheck(deps, options),
    diskCheck(deps, options.outputDir, options.batchNeedBytes ?? null),
    bootIdCheck(deps),
  ]);
}

async function gpuCheck(deps: DoctorDeps): Promise<DoctorCheck> {
  const seen = await deps.observeGpus();
  if (seen.kind === 'unobservable') {
    return warn(
      'gpus',
      `not observable (${seen.reason}): ${seen.detail}`,
      'install the NVIDIA driver so nvidia-smi works; CPU-only jobs are unaffected',
    );
  }
  const each = seen.gpus.map(
    (g) => `#${g.index} ${g.name} ${g.memoryTotalMib ?? '?'} MiB (${g.memoryUsedMib ?? '?'} used)`,
  );
  return ok('gpus', `${seen.gpus.length} GPU(s), ${seen.totalMib} MiB in all: ${each.join('; ')}`);
}

async function registryCheck(deps: DoctorDeps, options: DoctorOptions): Promise<DoctorCheck> {
  const name = 'registry';
  let target: RegistryTarget;
  let where: string;
  if (options.registryPostgres !== undefined) {
    target = { kind: 'postgres', ...options.registryPostgres };
    where = options.registryPostgres.display;
  } else if (options.registryPath !== null) {
    target = { kind: 'file', path: options.registryPath };
    where = options.registryPath;
  } else if (await deps.fileExists(options.defaultRegistryPath)) {
    target = { kind: 'file', path: options.defaultRegistryPath };
    where = options.defaultRegistryPath;
  } else {
    target = { kind: 'temp' };
    where = `a scratch database (no registry yet at ${options.defaultRegistryPath}; it is created on first use)`;
  }
  let probe: RegistryProbe | void;
  try {
    probe = await deps.probeRegistry(target);
  } catch (err) {
    return fail(
      name,
      `cannot write ${where}: ${(err as Error).message}`,
      target.kind === 'postgres'
        ? 'check that the server runs and the URL, user and password (PGPASSWORD) are right'
        : 'make the directory writable, or choose another file with --registry',
    );
  }
  const schema = probe?.schema ?? null;
  if (schema === null) return ok(name, `writable: ${where}`);
  if (schema.current > schema.supported) {
    return fail(name, `${where}: schema version ${schema.current} is newer than this tool (${schema.supported})`, 'upgrade roboguide-eval, or point --registry at another database');
  }
  const version = schema.current === schema.supported ? `schema version ${schema.current}` : `schema version ${schema.current} (migrated to ${schema.supported} on first use)`;
  return ok(name, `writable: ${where}; ${version}`);
}

async function diskCheck(deps: DoctorDeps, outputDir: string, batchNeedBytes: number | null): Promise<DoctorCheck> {
  const name = 'disk';
  let free: { path: string; freeBytes: number };
  try {
    free = await deps.freeDiskBytes(outputDir);
  } catch (err) {
    return fail(
      name,
      `cannot read free space for ${outputDir}: ${(err as Error).message}`,
      'choose an existing --output location',
    );
  }
  const detail = `${formatBytes(free.freeBytes)} free on the filesystem of ${free.path}`;
  const fix = 'free space or choose another --output (logs and sessions are kept in full)';
  if (free.freeBytes < DISK_FAIL_BYTES)
    return fail(name, `${detail} (< ${formatBytes(DISK_FAIL_BYTES)})`, fix);
  if (free.freeBytes < DISK_WARN_BYTES)
    return warn(name, `${detail} (< ${formatBytes(DISK_WARN_BYTES)})`, fix);
  const shortfall = batchNeedBytes === null ? null : outputSpaceWarning(batchNeedBytes, free);
  if (shortfall !== null) return warn(name, shortfall, 'free space, choose another --output, or lower the jobs\' log_limit_bytes');
  return ok(name, detail);
}

async function bootIdCheck(deps: DoctorDeps): Promise<DoctorCheck> {
  const bootId = await deps.readBootId();
  if (bootId === null || bootId === '') {
    return warn(
      'boot id',
      'unreadable: resume cannot tell a reboot from a live supervisor',
      'run on Linux with /proc mounted',
    );
  }
  return ok('boot id', bootId);
}

export function formatBytes(bytes: number): string {
  if (bytes >= GIB) return `${(bytes / GIB).toFixed(1)} GiB`;
  return `${Math.round(bytes / MIB)} MiB`;
}

const MARKS: Readonly<Record<CheckStatus, string>> = { ok: '✓', warn: '!', fail: '✗' };

/** Human table: mark, aligned name, detail; the fix on its own line under every line that is not ok. */
export function renderDoctorTable(report: DoctorReport): string {
  const width = Math.max(...report.checks.map((c) => c.name.length));
  const lines: string[] = [];
  for (const check of report.checks) {
    lines.push(`${MARKS[check.status]} ${check.name.padEnd(width)}  ${check.detail}`);
    if (check.status !== 'ok' && check.fix !== null) lines.push(`  ${' '.repeat(width)}  fix: ${check.fix}`);
  }
  const count = (s: CheckStatus): number => report.checks.filter((c) => c.status === s).length;
  lines.push(
    '',
    `${count('ok')} ok, ${count('warn')} warning(s), ${count('fail')} failure(s): exit ${report.exitCode}`,
  );
  return lines.join('\n');
}
