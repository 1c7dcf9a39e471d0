import { checkMounts, defaultMountRoots, normalizeAbsolute } from '../../core/mount-policy.js';
import { ExitCode, InternalError } from '../../core/errors.js';
import type { EngineInfo } from '../ports/container-runtime.js';
import type { DoctorDeps } from '../ports/doctor-probes.js';
import { ok, warn, type CheckStatus, type DoctorCheck, type DoctorExitCode } from './check.js';
import type { MountMode } from '../../core/mount-mode.js';
import { runtimeProbe, runtimesCheck } from './runtime-checks.js';
import { PAIR_DRIVER_IMAGE } from '../../core/synthetic-images.js';
import { engineChecks } from './engine-checks.js';
import { hostChecks } from './host-checks.js';
import { pairNetworkCheck } from './network-check.js';
import { hostPrivilegeCheck } from './privilege-check.js';
import type { DoctorOptions, DoctorReport } from './doctor-options.js';

/** The verdict: 3 when no engine answers, else 1 on any failed check, else 0 (warnings do not fail). */
export function doctorExitCode(checks: readonly DoctorCheck[], engineReachable: boolean): DoctorExitCode {
  if (!engineReachable) return ExitCode.engineUnavailable;
  return checks.some((c) => c.status === 'fail') ? ExitCode.runtime : ExitCode.ok;
}

export async function runDoctor(deps: DoctorDeps, options: DoctorOptions): Promise<DoctorReport> {
  const info = deps.runtime.info();
  info.catch(() => undefined); // engineChecks reports the failure
  const facts = deps.hostFacts({
    outputDir: options.outputDir,
    dataRoot: info.then(
      (i) => i.dataRoot ?? null,
      () => Promise.reject(new InternalError('the engine did not answer')),
    ),
  });
  const [engine, host] = await Promise.all([
    engineChecks(deps, options, info),
    hostChecks(deps, options, facts),
  ]);
  const network =
    engine.reachable && deps.pairNetwork !== undefined
      ? [await pairNetworkCheck(deps.pairNetwork, options.bin)]
      : [];
  const runtimes = await ociRuntimeChecks(deps, options, info);
  const dataRoot = await info.then(
    (i) => i.dataRoot,
    () => undefined,
  );
  const privilege = await info.then(
    (i) => [hostPrivilegeCheck(i)],
    () => [],
  );
  const checks = [
    ...engine.checks,
    ...runtimes,
    ...privilege,
    ...network,
    ...host,
    mountRootsCheck(options.mountRoots ?? [], dataRoot, options.homeDir),
    ...(deps.mountMode !== undefined ? [mountModeCheck(await deps.mountMode())] : []),
  ];
  return { checks, engineReachable: engine.reachable, exitCode: doctorExitCode(checks, engine.reachable) };
}

/** The OCI runtimes (issue 29): the engine's list, and with `probeRuntime` a container run under it. */
async function ociRuntimeChecks(
  deps: DoctorDeps,
  options: DoctorOptions,
  info: Promise<EngineInfo>,
): Promise<DoctorCheck[]> {
  const answered = await info.then(
    (i) => i,
    () => null,
  );
  if (answered === null)
    return options.probeRuntime !== undefined
      ? [
          warn(
            `runtime probe (${options.probeRuntime})`,
            'not checked: the engine check failed',
            'fix the engine first',
          ),
        ]
      : [];
  return [
    runtimesCheck(answered),
    ...(options.probeRuntime !== undefined
      ? [await runtimeProbe(deps, answered, options.images[0] ?? PAIR_DRIVER_IMAGE, options.probeRuntime)]
      : []),
  ];
}

/**
 * `mount roots`: the allowlist every cwd and session mount must lie under (docs/spec.md 5.3): the default roots
 * plus `--mount-root`, or the `--mount-root` folders alone with `--mount-root-only`; none given: the defaults. A
 * root the rules refuse (a system folder, one holding the engine's data…) is warned about. The home folder is a
 * root for its non-hidden subfolders: it is checked through one of them.
 */
export function mountRootsCheck(
  given: readonly string[],
  dataRoot: string | undefined,
  homeDir?: string,
): DoctorCheck {
  const roots = given.length > 0 ? given : defaultMountRoots(homeDir);
  const home = homeDir !== undefined ? normalizeAbsolute(homeDir) : undefined;
  const refused = roots.flatMap((root) =>
    checkMounts([{ field: root, hostPath: root === home ? `${root}/projects` : root }], {
      ...(dataRoot !== undefined ? { ownedDirs: [dataRoot] } : {}),
      mountRoots: roots,
    }).map((i) => `${root} ${i.message}`),
  );
  return {
    name: 'mount roots',
    status: refused.length === 0 ? 'ok' : 'warn',
    detail:
      refused.length === 0
        ? `every cwd and session mount must lie under ${roots.join(', ')}`
        : refused.join('; '),
    fix:
      refused.length === 0
        ? null
        : 'name a work folder as --mount-root, not a protected folder or one that holds one',
    facts: { mount_roots: roots },
  };
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

/** Which mount mode pairs and sessions get here (docs/spec.md 5.3): `staged` is the wall, `walked` a detector. */
export function mountModeCheck(mode: MountMode): DoctorCheck {
  if (mode === 'staged')
    return ok(
      'mounts',
      'staged: each bind source is opened from / without following a link and bound onto a point of ours (/run/roboguide-eval/mounts); the engine gets that point',
    );
  return warn(
    'mounts',
    'walked: this host refused a bind mount of ours (not root, or a rootless engine): sources are walked with lstat and verified after the create and the start, which detects a swapped folder but cannot prevent it',
    'run as root on a host that allows bind mounts (mount --bind) to get staged mounts',
  );
}
