import type { DeviceRequest } from './device-requests.js';

/**
 * The proof that a container got the GPUs it asked for, from the container itself (issue 28). An engine (Podman 4
 * with Docker's DeviceRequests, or any runtime that ignores them) can accept a GPU request, start the container and
 * give it no GPU: "a container asking for gpus started" proves nothing. Two checks, both pure here:
 * - `gpuRequestDropped`: the created container's inspect still holds the request (DeviceRequests, or CDI devices);
 * - `judgeGpuView`: what a probe container printed (GPU_PROBE_SCRIPT) shows the requested devices — `nvidia-smi -L`
 *   where the image has it, else `/dev/nvidia<N>` device nodes, else at least NVIDIA_VISIBLE_DEVICES as asked.
 */

/** What the engine kept of a GPU request on the created container (its inspect). */
export interface GpuGrant {
  /** Entries of HostConfig.DeviceRequests. */
  readonly deviceRequests: number;
  /** CDI device names (`nvidia.com/gpu=0`) among HostConfig.Devices. */
  readonly cdiDevices: number;
}

/** A CDI fully qualified device name: `vendor.com/class=name`. */
export const CDI_DEVICE_NAME = /^[A-Za-z0-9][A-Za-z0-9.-]*\/[A-Za-z0-9][A-Za-z0-9_.-]*=[A-Za-z0-9_.:-]+$/;

/** The reason a GPU request was dropped by the engine, or null when it was kept (or none was made). */
export function gpuRequestDropped(requested: readonly DeviceRequest[], grant: GpuGrant): string | null {
  if (requested.length === 0) return null;
  if (grant.deviceRequests > 0 || grant.cdiDevices > 0) return null;
  return 'the engine accepted the GPU request but the created container holds none (no DeviceRequests, no CDI devices in its inspect): it would run without a GPU';
}

/**
 * Run by `sh -c` in the probe container; one `key=value` line per fact, nvidia-smi's own lines prefixed `smi: `.
 * Needs only a POSIX shell (busybox); `${X+1}` tells an empty NVIDIA_VISIBLE_DEVICES from an unset one.
 */
export const GPU_PROBE_SCRIPT = [
  'echo "visible_set=${NVIDIA_VISIBLE_DEVICES+1}"',
  'echo "visible=${NVIDIA_VISIBLE_DEVICES-}"',
  'for d in /dev/nvidia[0-9]*; do [ -e "$d" ] && echo "node=$d"; done',
  'if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L >/tmp/.rg-smi 2>&1; echo "smi_exit=$?"; while IFS= read -r l; do echo "smi: $l"; done </tmp/.rg-smi; else echo "smi=absent"; fi',
  'echo probe=done',
].join('; ');

/** What the probe container saw. */
export interface GpuView {
  /** NVIDIA_VISIBLE_DEVICES in the container, null when unset. */
  readonly visibleDevices: string | null;
  /** `/dev/nvidia0`, `/dev/nvidia1`…: GPU device nodes (not nvidiactl / nvidia-uvm). */
  readonly deviceNodes: readonly string[];
  /** nvidia-smi -L: null when the image has no nvidia-smi; else its exit code and the GPUs it listed (`GPU 0: … (UUID: …)`). */
  readonly smi: {
    readonly exitCode: number;
    readonly gpus: readonly string[];
    readonly other: readonly string[];
  } | null;
  /** The script ran to its end (a truncated or foreign output is not a view). */
  readonly complete: boolean;
}

const SMI_GPU_LINE = /^GPU \d+: .+\(UUID: [^)]+\)$/;

/** The one place the probe's output (including a fake or real nvidia-smi's) is parsed. Never throws. */
export function parseGpuProbeOutput(text: string): GpuView {
  let visibleSet = false;
  let visible = '';
  const nodes: string[] = [];
  let smiExit: number | null = null;
  let smiAbsent = false;
  const gpus: string[] = [];
  const other: string[] = [];
  let complete = false;
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trimEnd();
    if (line.startsWith('smi: ')) {
      const body = line.slice('smi: '.length).trim();
      if (SMI_GPU_LINE.test(body)) gpus.push(body);
      else if (body !== '') other.push(body);
    } else if (line === 'visible_set=1') visibleSet = true;
    else if (line.startsWith('visible=')) visible = line.slice('visible='.length);
    else if (/^node=\/dev\/nvidia\d+$/.test(line)) nodes.push(line.slice('node='.length));
    else if (/^smi_exit=\d+$/.test(line)) smiExit = Number(line.slice('smi_exit='.length));
    else if (line === 'smi=absent') smiAbsent = true;
    else if (line === 'probe=done') complete = true;
  }
  const smi = smiAbsent || smiExit === null ? null : { exitCode: smiExit, gpus, other };
  return { visibleDevices: visibleSet ? visible : null, deviceNodes: nodes, smi, complete };
}

export type GpuViewVerdict =
  { readonly shown: true; readonly evidence: string } | { readonly shown: false; readonly why: string };

/** How many GPUs a request asks for (null: all of them). */
function requestedCount(request: DeviceRequest): number | null {
  if (request.DeviceIDs !== undefined) return request.DeviceIDs.length;
  return request.Count === undefined || request.Count < 0 ? null : request.Count;
}

/** NVIDIA_VISIBLE_DEVICES matches the request: "all" for all, the ids for a list, n entries for a count. */
function visibleMatches(request: DeviceRequest, visible: string): boolean {
  const entries = visible
    .split(',')
    .map((e) => e.trim())
    .filter((e) => e !== '');
  if (visible === 'none' || visible === 'void' || entries.length === 0) return false;
  if (request.DeviceIDs !== undefined)
    return (
      entries.length === request.DeviceIDs.length && request.DeviceIDs.every((id) => entries.includes(id))
    );
  const count = requestedCount(request);
  if (count === null) return visible === 'all' || entries.length > 0;
  return visible === 'all' ? false : entries.length === count;
}

/** Whether the container shows the GPUs `request` asked for: nvidia-smi where present decides, else device nodes, else the env. */
export function judgeGpuView(request: DeviceRequest, view: GpuView): GpuViewVerdict {
  if (!view.complete)
    return {
      shown: false,
      why: 'the probe did not run to its end (its output was cut or the image has no POSIX shell)',
    };
  const count = requestedCount(request);
  const enough = (n: number): boolean => (count === null ? n > 0 : n >= count);
  if (view.smi !== null) {
    if (view.smi.exitCode === 0 && enough(view.smi.gpus.length))
      return {
        shown: true,
        evidence: `nvidia-smi -L in the container lists ${view.smi.gpus.length} GPU(s): ${view.smi.gpus.join('; ')}`,
      };
    const said = [...view.smi.gpus, ...view.smi.other].join('; ').slice(0, 200);
    return {
      shown: false,
      why: `nvidia-smi -L in the container exited ${view.smi.exitCode} listing ${view.smi.gpus.length} GPU(s)${said !== '' ? ` (${said})` : ''}`,
    };
  }
  if (enough(view.deviceNodes.length))
    return {
      shown: true,
      evidence: `the container has the device nodes ${view.deviceNodes.join(', ')} (no nvidia-smi in the image)`,
    };
  if (view.visibleDevices !== null && visibleMatches(request, view.visibleDevices)) {
    return {
      shown: true,
      evidence: `the container sees NVIDIA_VISIBLE_DEVICES=${view.visibleDevices} as asked (no /dev/nvidia<N> device nodes, no nvidia-smi in the image: the engine passed the request on, no GPU was seen)`,
    };
  }
  const env =
    view.visibleDevices === null
      ? 'no NVIDIA_VISIBLE_DEVICES'
      : `NVIDIA_VISIBLE_DEVICES=${view.visibleDevices || '""'} (not what was asked)`;
  return {
    shown: false,
    why: `the container shows no GPU: ${env}, ${view.deviceNodes.length === 0 ? 'no /dev/nvidia<N> device nodes' : `only ${view.deviceNodes.join(', ')}`}, no nvidia-smi in the image`,
  };
}
