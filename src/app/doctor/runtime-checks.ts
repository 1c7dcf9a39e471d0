import type { Readable } from 'node:stream';
import type { EngineInfo } from '../ports/container-runtime.js';
import {
  DEFAULT_RUNTIME,
  GVISOR_GPU_FLAG,
  GVISOR_KERNEL_RELEASE,
  GVISOR_RUNTIME,
  gvisorDaemonEntry,
  GVISOR_SECCOMP_FLAG,
  hasNvproxy,
  hasOciSeccomp,
  isGvisor,
  type EngineRuntime,
} from '../../core/oci-runtime.js';
import { fail, ok, warn, type DoctorCheck } from './check.js';
import type { DoctorDeps } from '../ports/doctor-probes.js';
import { engineErrorDetail, PROBE_DEADLINE_MS, PROBE_LABELS, withProbeRemoved } from './engine-checks.js';
import { probeContainerSpec } from '../probe-container.js';

/**
 * `doctor`'s OCI runtime lines (issue 29): the engine's registered runtimes with how to register gVisor's, and with
 * `--probe-runtime NAME` a container that really runs under it and the kernel it reports (gVisor's says 4.4.0).
 */

const REGISTER_GVISOR = `add ${gvisorDaemonEntry()} to /etc/docker/daemon.json (merge with its other keys; on an engine in a network namespace of its own, also "runtimeArgs": ["--network=none"]; for GPUs "${GVISOR_GPU_FLAG}"), then restart dockerd (systemctl restart docker)`;

function registeredOf(info: EngineInfo): readonly EngineRuntime[] {
  return info.runtimeDetails ?? info.runtimes.map((name) => ({ name, path: '', args: [] }));
}

function describe(runtime: EngineRuntime): string {
  const args = runtime.args.length > 0 ? ` ${runtime.args.join(' ')}` : '';
  const what = isGvisor(runtime)
    ? ` (gVisor${hasNvproxy(runtime.args) ? ', GPUs through nvproxy' : ', no GPUs'})`
    : '';
  return runtime.path !== '' && runtime.path !== runtime.name
    ? `${runtime.name}${what}: ${runtime.path}${args}`
    : `${runtime.name}${what}${args}`;
}

/** `runtimes`: what a job's `runtime` may name here; how to register gVisor when it is not there. */
export function runtimesCheck(info: EngineInfo): DoctorCheck {
  const registered = registeredOf(info);
  const list = registered.length > 0 ? registered.map(describe).join('; ') : 'none listed';
  const gvisor = registered.find(isGvisor);
  const check =
    gvisor !== undefined && !hasOciSeccomp(gvisor.args)
      ? warn(
          'runtimes',
          `${list}. gVisor (${gvisor.name}) runs without ${GVISOR_SECCOMP_FLAG}: it ignores our seccomp profile, so jobs and sessions asking for it are refused`,
          `add "${GVISOR_SECCOMP_FLAG}" to its runtimeArgs in /etc/docker/daemon.json, then restart dockerd`,
        )
      : gvisor !== undefined
        ? ok(
            'runtimes',
            `${list}. Jobs and sessions may ask for "runtime": "${gvisor.name}" (gVisor); check it with --probe-runtime ${gvisor.name}`,
          )
        : ok(
            'runtimes',
            `${list}. gVisor (${GVISOR_RUNTIME}) is not registered: to run pairs with "runtime": "${GVISOR_RUNTIME}", ${REGISTER_GVISOR}`,
          );
  return {
    ...check,
    facts: { runtimes: registered.map((r) => ({ name: r.name, path: r.path, args: [...r.args] })) },
  };
}

async function readAll(stream: Readable): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.from(chunk as Buffer));
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * `runtime probe`: a container under `runtime` (network none) that prints `uname -r` and exits; always removed and its
 * absence verified. Under gVisor the kernel must be gVisor's (4.4.0): anything else means the runtime was not used.
 */
export async function runtimeProbe(
  deps: DoctorDeps,
  info: EngineInfo,
  image: string,
  runtime: string,
): Promise<DoctorCheck> {
  const name = `runtime probe (${runtime})`;
  const registered = registeredOf(info).find((r) => r.name === runtime);
  if (registered === undefined) return unregistered(name, info, runtime);
  let id: string | null = null;
  let check: DoctorCheck;
  try {
    id = (
      await deps.runtime.create(
        probeContainerSpec({
          name: `roboguide-doctor-runtime-${deps.newId()}`,
          image,
          cmd: ['uname', '-r'],
          labels: PROBE_LABELS,
          runtime,
        }),
      )
    ).id;
    check = await probeRun(deps, id, { name, image, registered });
  } catch (err) {
    check = fail(
      name,
      engineErrorDetail(err),
      "check the engine log (journalctl -u docker) and the runtime's entry in daemon.json",
    );
  }
  return id === null ? check : withProbeRemoved(deps, id, check);
}

function unregistered(name: string, info: EngineInfo, runtime: string): DoctorCheck {
  const names =
    registeredOf(info)
      .map((r) => r.name)
      .join(', ') || 'none listed';
  return fail(
    name,
    `runtime "${runtime}" is not registered with the engine (its runtimes: ${names})`,
    runtime === GVISOR_RUNTIME
      ? REGISTER_GVISOR
      : `register "${runtime}" in daemon.json "runtimes" and restart dockerd`,
  );
}

/** Starts the created probe, waits for its exit and judges it: exit 0, then the kernel it printed. */
async function probeRun(
  deps: DoctorDeps,
  id: string,
  probe: { readonly name: string; readonly image: string; readonly registered: EngineRuntime },
): Promise<DoctorCheck> {
  const { name, image } = probe;
  const started = deps.clock.now().getTime();
  await deps.runtime.start(id);
  const waited = await deps.runtime.wait(id, { deadlineMs: deps.clock.now().getTime() + PROBE_DEADLINE_MS });
  const seconds = ((deps.clock.now().getTime() - started) / 1000).toFixed(2);
  if (waited.kind !== 'exited')
    return fail(
      name,
      `the probe container did not exit within ${PROBE_DEADLINE_MS} ms`,
      'check the engine log and the runtime',
    );
  if (waited.exitCode !== 0)
    return fail(
      name,
      `the probe container (${image}, "uname -r") exited ${waited.exitCode}`,
      "check the image and the runtime (the engine log names the runtime's error)",
    );
  const kernel =
    deps.runtime.follow === undefined ? null : (await readAll((await deps.runtime.follow(id)).stdout)).trim();
  return kernelCheck(name, probe.registered, kernel, seconds);
}

/** The kernel a probe under `runtime` reported: gVisor's 4.4.0 under gVisor, else anything (null: not read). */
function kernelCheck(
  name: string,
  registered: EngineRuntime,
  kernel: string | null,
  seconds: string,
): DoctorCheck {
  const runtime = registered.name;
  if (kernel === null)
    return warn(
      name,
      `a container under ${runtime} started and exited 0 in ${seconds} s; its kernel was not read`,
      'run doctor against a Docker engine',
    );
  if (isGvisor(registered) && kernel !== GVISOR_KERNEL_RELEASE)
    return fail(
      name,
      `a container under ${runtime} reported kernel ${kernel}, not gVisor's ${GVISOR_KERNEL_RELEASE}: it did not run under gVisor`,
      `check the "${runtime}" entry of daemon.json (its path must be runsc) and restart dockerd`,
    );
  return ok(
    name,
    `a container under ${runtime} ran in ${seconds} s and reported kernel ${kernel}${isGvisor(registered) ? " (gVisor's)" : runtime === DEFAULT_RUNTIME ? " (the host's)" : ''}`,
  );
}
