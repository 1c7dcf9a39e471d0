import { outputSpaceWarning } from '../../core/output-budget.js';
import { fail, formatBytes, GIB, MIB, ok, warn, type DoctorCheck } from './check.js';
import type { HostFactsRecord } from '../../core/host-facts.js';
import type { DoctorDeps, RegistryProbe, RegistryTarget } from '../ports/doctor-probes.js';
import type { DoctorOptions } from './doctor-options.js';
import { dataRootCheck, gpuCheck, hostCheck } from './facts-checks.js';
import { imageBudgetCheck } from './image-budget-check.js';
import { limitDefaults, LOW_DISK_LIMIT_BYTES } from '../../core/pair-limits.js';
import {
  diskEnforcementDetail,
  projectQuotaSupport,
  type ProjectQuotaSupport,
} from '../../core/disk-quota.js';

export const DISK_WARN_BYTES = 5 * GIB;
export const DISK_FAIL_BYTES = 512 * MIB;

/** The checks of this host; `facts` is the one gathering of host facts of the run (bounded in time). */
export async function hostChecks(
  deps: DoctorDeps,
  options: DoctorOptions,
  facts: Promise<HostFactsRecord>,
): Promise<DoctorCheck[]> {
  return Promise.all([
    facts.then(hostCheck),
    Promise.all([deps.observeGpus(), facts]).then(([seen, f]) => gpuCheck(seen, f.gpu_controllers)),
    registryCheck(deps, options),
    Promise.all([diskCheck(deps, options.outputDir, options.batchNeedBytes ?? null), facts]).then(
      ([check, f]) => withOutputFs(check, f.output_fs),
    ),
    facts.then((f) => dataRootCheck(f.engine_data_root_fs)),
    facts.then((f) => imageBudgetCheck(f.engine_data_root_fs, options.imageDiskBytes)),
    Promise.all([facts, quotaSupportOf(deps, options.outputDir)]).then(([f, quota]) =>
      pairLimitsCheck(f, quota),
    ),
    bootIdCheck(deps),
  ]);
}

/**
 * The limits a job without its own would get on this host (issue 22), one pair at a time (a batch with two
 * workers halves memory and disk). Warns when the default disk limit is low: it is a share of the free space.
 */
export function pairLimitsCheck(facts: HostFactsRecord, quota?: ProjectQuotaSupport): DoctorCheck {
  const defaults = limitDefaults({
    memoryTotalBytes: facts.memory.kind === 'known' ? facts.memory.total_bytes : null,
    outputFreeBytes: facts.output_fs.kind === 'known' ? facts.output_fs.free_bytes : null,
    maxConcurrentPairs: 1,
  });
  const enforcement = quota === undefined ? '' : `; ${diskEnforcementDetail(quota)}`;
  const detail = `default per pair: pids ${defaults.pids_limit}, memory ${defaults.memory_mib} MiB, disk ${formatBytes(defaults.disk_limit_bytes)} (${defaults.basis})${enforcement}`;
  if (defaults.disk_limit_bytes < LOW_DISK_LIMIT_BYTES) {
    return warn(
      'pair limits',
      `${detail}: the default disk limit is under ${formatBytes(LOW_DISK_LIMIT_BYTES)}`,
      'free space on the output file system, or give each job its disk_limit_bytes',
    );
  }
  return ok('pair limits', detail);
}

/** Whether the output file system could carry a project quota; undefined where the probe is absent or failed. */
async function quotaSupportOf(deps: DoctorDeps, outputDir: string): Promise<ProjectQuotaSupport | undefined> {
  if (deps.mountOptionsOf === undefined) return undefined;
  try {
    return projectQuotaSupport(await deps.mountOptionsOf(outputDir));
  } catch {
    return undefined;
  }
}

/** The disk check's verdict is statfs's (free bytes for this user); the file system's facts are added to it. */
function withOutputFs(check: DoctorCheck, fs: HostFactsRecord['output_fs']): DoctorCheck {
  const about =
    fs.kind === 'known'
      ? `${fs.type} ${fs.fs} mounted on ${fs.mount}, ${formatBytes(fs.size_bytes)} in all`
      : `file system unknown: ${fs.reason}`;
  return { ...check, detail: `${check.detail} (${about})`, facts: { output_fs: fs } };
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
    return fail(
      name,
      `${where}: schema version ${schema.current} is newer than this tool (${schema.supported})`,
      'upgrade roboguide-eval, or point --registry at another database',
    );
  }
  const version =
    schema.current === schema.supported
      ? `schema version ${schema.current}`
      : `schema version ${schema.current} (migrated to ${schema.supported} on first use)`;
  return ok(name, `writable: ${where}; ${version}`);
}

async function diskCheck(
  deps: DoctorDeps,
  outputDir: string,
  batchNeedBytes: number | null,
): Promise<DoctorCheck> {
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
  if (shortfall !== null)
    return warn(name, shortfall, "free space, choose another --output, or lower the jobs' log_limit_bytes");
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
