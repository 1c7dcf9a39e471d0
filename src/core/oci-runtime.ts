import { z } from 'zod';

/**
 * The OCI runtime a pair's (or a session's) container runs under (issue 29): `runc` (the engine's usual runtime, the
 * host's kernel) or any runtime the engine registers, e.g. gVisor's `runsc` (a user-space kernel between the pair and
 * the host's). Pure: the engine's registered runtimes come in as plain data.
 */
export const DEFAULT_RUNTIME = 'runc';
/** gVisor's runtime binary; its GPU support is the `--nvproxy` flag (docs/spec.md §5.1, "runtime"). */
export const GVISOR_RUNTIME = 'runsc';
export const GVISOR_GPU_FLAG = '--nvproxy';
/** The kernel release gVisor reports to the programs it runs (`uname -r`). */
export const GVISOR_KERNEL_RELEASE = '4.4.0';

const RUNTIME_RULE =
  'must be a runtime name the engine registers ([A-Za-z0-9][A-Za-z0-9._-]{0,63}), e.g. "runc" or "runsc"';
export const RuntimeName = z
  .string({ error: RUNTIME_RULE })
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, { error: RUNTIME_RULE })
  .meta({
    description:
      'OCI runtime of the container: "runc" (default; the host kernel) or one the engine registers, e.g. "runsc" (gVisor: its own kernel, stronger isolation, slower start; GPUs only with runsc --nvproxy)',
  });

/** One runtime as the engine lists it (`docker info` Runtimes): its name, binary and the arguments it is run with. */
export interface EngineRuntime {
  readonly name: string;
  readonly path: string;
  readonly args: readonly string[];
}

/** Whether a registered runtime is gVisor's (by name or by its binary). */
export function isGvisor(runtime: Pick<EngineRuntime, 'name' | 'path'>): boolean {
  return runtime.name === GVISOR_RUNTIME || /(^|\/)runsc$/.test(runtime.path);
}

/** Whether gVisor is run with its GPU proxy (`--nvproxy` or `--nvproxy=true`). */
export function hasNvproxy(args: readonly string[]): boolean {
  return args.some((a) => a === GVISOR_GPU_FLAG || a === `${GVISOR_GPU_FLAG}=true`);
}

/**
 * gVisor applies the container's seccomp profile inside its sandbox only with this flag: without it runsc ignores our
 * profile, and a pair's chmod 4755 reaches the host file through its gofer (measured with runsc 20221219: uid 65534
 * then ran the file as root).
 */
export const GVISOR_SECCOMP_FLAG = '--oci-seccomp';

/** Whether gVisor enforces the container's seccomp profile (`--oci-seccomp` or `--oci-seccomp=true`). */
export function hasOciSeccomp(args: readonly string[]): boolean {
  return args.some((a) => a === GVISOR_SECCOMP_FLAG || a === `${GVISOR_SECCOMP_FLAG}=true`);
}

/** gVisor run with an overlay whose upper layer is not the container's own layer on the host (`--overlay2=root:memory`…). */
function rootInMemory(args: readonly string[]): boolean {
  return args.some(
    (a) =>
      a === '--overlay' || a === '--overlay=true' || (a.startsWith('--overlay2=') && a !== '--overlay2=none'),
  );
}

/**
 * gVisor mounts a tmpfs of its own at /tmp, inside the sandbox: what a pair writes there never reaches the engine, so a
 * sessions folder under /tmp could not be copied out (measured with runsc 20221219; its memory limit bounds it).
 */
export function gvisorSessionsDirProblem(sessionsDir: string): string | null {
  return sessionsDir === '/tmp' || sessionsDir.startsWith('/tmp/')
    ? 'must not lie under /tmp under gVisor (runsc): its /tmp is a file system inside the sandbox that the engine cannot copy out; choose another folder (default /root/.codex/sessions)'
    : null;
}

/**
 * Why `requested` cannot run here, in words (null: it can): not registered with the engine (naming the engine's
 * runtimes), gVisor that ignores our seccomp profile or keeps the root file system in memory, or GPUs under gVisor
 * without its GPU proxy. `runtimes` are the engine's (`docker info`).
 */
export function runtimeProblem(
  requested: string,
  runtimes: readonly EngineRuntime[],
  wantsGpus: boolean,
): string | null {
  const found = runtimes.find((r) => r.name === requested);
  if (found === undefined) {
    const names = runtimes.map((r) => r.name).join(', ') || 'none listed';
    return `runtime "${requested}" is not registered with the engine (its runtimes: ${names}); register it in daemon.json "runtimes" and restart dockerd (\`roboguide-eval doctor\` says how)`;
  }
  if (isGvisor(found) && rootInMemory(found.args)) {
    return `runtime "${requested}" (gVisor) keeps the container's root file system in memory (${found.args.filter((a) => a.startsWith('--overlay')).join(' ')}): the sessions copy and the disk limit would see nothing the pair wrote; register it with "--overlay2=none" (or without --overlay flags) in daemon.json and restart dockerd`;
  }
  if (isGvisor(found) && !hasOciSeccomp(found.args)) {
    return `runtime "${requested}" (gVisor) ignores the container's seccomp profile without ${GVISOR_SECCOMP_FLAG}: a pair could leave a setuid file on the host through it; add "${GVISOR_SECCOMP_FLAG}" to its runtimeArgs in daemon.json and restart dockerd`;
  }
  if (wantsGpus && isGvisor(found) && !hasNvproxy(found.args)) {
    const args = found.args.length > 0 ? found.args.join(' ') : 'none';
    return `gpus under runtime "${requested}" (gVisor) need its GPU proxy: the engine runs ${found.path} with arguments ${args}, without ${GVISOR_GPU_FLAG}; add "${GVISOR_GPU_FLAG}" to its runtimeArgs in daemon.json and restart dockerd, or run this job under "${DEFAULT_RUNTIME}"`;
  }
  return null;
}

/** The `runtimes` entry of daemon.json that registers gVisor (what `doctor` prints), with its args. */
export function gvisorDaemonEntry(
  path = '/usr/bin/runsc',
  args: readonly string[] = [GVISOR_SECCOMP_FLAG],
): string {
  return JSON.stringify({
    runtimes: { [GVISOR_RUNTIME]: { path, ...(args.length > 0 ? { runtimeArgs: args } : {}) } },
  });
}
