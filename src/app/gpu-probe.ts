import type { Readable } from 'node:stream';
import { deviceRequestsFor, type GpuSelection } from '../core/gpu/device-requests.js';
import {
  GPU_PROBE_SCRIPT,
  gpuRequestDropped,
  judgeGpuView,
  parseGpuProbeOutput,
} from '../core/gpu/gpu-proof.js';
import { containerLimitsOf } from '../core/pair-limits.js';
import type { Clock } from './ports/clock.js';
import type { ContainerRuntime } from './ports/container-runtime.js';
import { probeContainerSpec } from './probe-container.js';
import { canProveGpuGrants } from './ports/runtime-capabilities.js';

/** The probe prints a few short lines; anything past this is not read. */
const PROBE_OUTPUT_MAX_BYTES = 64 * 1024;
/** After the probe exited, its attached output gets this long to end. */
const OUTPUT_END_MS = 5_000;

export type GpuProbeVerdict =
  | { readonly kind: 'shown'; readonly evidence: string }
  /** The engine dropped the request (inspect), or the container shows no GPU (its own view). */
  | { readonly kind: 'not_shown'; readonly why: string }
  | { readonly kind: 'not_exited'; readonly ms: number }
  | { readonly kind: 'exit'; readonly exitCode: number; readonly output: string }
  | { readonly kind: 'error'; readonly error: unknown };

export interface GpuProbeInput {
  readonly name: string;
  readonly image: string;
  readonly gpus: Exclude<GpuSelection, undefined>;
  readonly labels: Readonly<Record<string, string>>;
  readonly timeoutMs: number;
}

/**
 * A GPU proof that cannot lie (issue 28), shared by `doctor --probe-gpu` and the test suite's GPU detection: a
 * container asking for `gpus` passes only when the engine kept the request (the created container's inspect) and
 * the container itself shows the devices (GPU_PROBE_SCRIPT: `nvidia-smi -L`, `/dev/nvidia<N>`, or at least
 * NVIDIA_VISIBLE_DEVICES as asked). "It started and exited 0" proves nothing: Podman 4 drops the request and starts
 * the container all the same. The image needs a POSIX shell. `containerId` is the container to remove (the caller
 * removes it and checks the 404, whatever the verdict).
 */
export async function probeGpuView(
  deps: {
    readonly runtime: Pick<ContainerRuntime, 'create' | 'attach' | 'start' | 'wait'>;
    readonly clock: Clock;
  },
  input: GpuProbeInput,
): Promise<{ readonly containerId: string | null; readonly verdict: GpuProbeVerdict }> {
  const { runtime } = deps;
  const [request] = deviceRequestsFor(input.gpus);
  let id: string | null = null;
  try {
    id = (
      await runtime.create(
        probeContainerSpec({
          name: input.name,
          image: input.image,
          cmd: ['sh', '-c', GPU_PROBE_SCRIPT],
          deviceRequests: request === undefined ? [] : [request],
          labels: input.labels,
          // Explicit limits (as every pair has): an engine's own defaults may exceed this host's (Podman's nofile).
          limits: containerLimitsOf({ pids_limit: 64, memory_mib: 64, cpus: null }),
        }),
      )
    ).id;
    if (request === undefined)
      return { containerId: id, verdict: { kind: 'not_shown', why: 'no GPU was requested' } };
    if (canProveGpuGrants(runtime)) {
      const grant = await runtime.gpuGrantOf(id);
      const dropped =
        grant === null
          ? 'the probe container vanished after its create'
          : gpuRequestDropped([request], grant);
      if (dropped !== null) return { containerId: id, verdict: { kind: 'not_shown', why: dropped } };
    }
    const output = await runtime.attach(id);
    output.stderr.resume();
    const text = readBounded(output.stdout);
    await runtime.start(id);
    const waited = await runtime.wait(id, { deadlineMs: deps.clock.now().getTime() + input.timeoutMs });
    if (waited.kind !== 'exited')
      return { containerId: id, verdict: { kind: 'not_exited', ms: input.timeoutMs } };
    const printed = await Promise.race([
      text,
      new Promise<string>((resolve) =>
        deps.clock.setTimer(OUTPUT_END_MS, () => resolve(''), { unref: true }),
      ),
    ]);
    if (waited.exitCode !== 0)
      return {
        containerId: id,
        verdict: { kind: 'exit', exitCode: waited.exitCode, output: printed.slice(0, 300) },
      };
    const judged = judgeGpuView(request, parseGpuProbeOutput(printed));
    return {
      containerId: id,
      verdict: judged.shown
        ? { kind: 'shown', evidence: judged.evidence }
        : { kind: 'not_shown', why: judged.why },
    };
  } catch (error) {
    return { containerId: id, verdict: { kind: 'error', error } };
  }
}

/** The stream's text up to PROBE_OUTPUT_MAX_BYTES (the rest is drained, unread); '' when it fails. */
function readBounded(stream: Readable): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let bytes = 0;
    stream.on('data', (chunk: Buffer) => {
      if (bytes >= PROBE_OUTPUT_MAX_BYTES) return;
      chunks.push(chunk.subarray(0, PROBE_OUTPUT_MAX_BYTES - bytes));
      bytes += chunk.length;
    });
    stream.once('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    stream.once('error', () => resolve(Buffer.concat(chunks).toString('utf8')));
  });
}
