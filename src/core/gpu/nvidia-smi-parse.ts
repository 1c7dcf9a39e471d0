/**
 * Parsing of `nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,memory.free
 * --format=csv,noheader,nounits` (one GPU a line, fields separated by ", ", memory in MiB),
 * and the comparison of an observation with a declared `capacity.gpu_total_mib`. Pure: never throws.
 */
export const NVIDIA_SMI_QUERY_ARGS: readonly string[] = [
  '--query-gpu=index,uuid,name,memory.total,memory.used,memory.free',
  '--format=csv,noheader,nounits',
];

export interface GpuInfo {
  readonly index: number;
  readonly uuid: string;
  readonly name: string;
  readonly memoryTotalMib: number | null;
  readonly memoryUsedMib: number | null;
  readonly memoryFreeMib: number | null;
}

export type UnobservableReason = 'binary_missing' | 'nonzero_exit' | 'garbage' | 'no_gpus' | 'timeout';

/** `totalMib` sums the memory.total of the GPUs that report one (see `compareDeclaredTotal`). */
export type GpuObservation =
  | { readonly kind: 'observed'; readonly gpus: GpuInfo[]; readonly totalMib: number }
  | { readonly kind: 'unobservable'; readonly reason: UnobservableReason; readonly detail: string };

const FIELD_COUNT = 6;
const DETAIL_MAX_CHARS = 160;
/** Placeholders nvidia-smi prints instead of a number; they become `null`. */
const NOT_A_VALUE = new Set(['[N/A]', '[Not Supported]', '[Insufficient Permissions]', '[Unknown Error]']);
const NO_DEVICES = /no devices were found/i;

type LineResult = { ok: true; gpu: GpuInfo } | { ok: false; rule: string };

export function parseNvidiaSmi(stdout: string): GpuObservation {
  const lines = stdout
    .split(/\r?\n|\r/)
    .map((line) => line.trim())
    .filter((line) => line !== '');
  if (lines.length === 0) return unobservable('no_gpus', 'nvidia-smi printed no GPU line');
  if (lines.some((line) => NO_DEVICES.test(line))) return unobservable('no_gpus', excerpt(lines.join(' ')));
  const gpus: GpuInfo[] = [];
  for (const [i, line] of lines.entries()) {
    const parsed = parseLine(line);
    if (!parsed.ok) return unobservable('garbage', `line ${i + 1}: ${parsed.rule}: ${excerpt(line)}`);
    gpus.push(parsed.gpu);
  }
  const duplicate = firstDuplicate(gpus);
  if (duplicate !== null) return unobservable('garbage', duplicate);
  const totalMib = gpus.reduce((sum, gpu) => sum + (gpu.memoryTotalMib ?? 0), 0);
  return { kind: 'observed', gpus, totalMib };
}

function parseLine(line: string): LineResult {
  const fields = line.split(',').map((field) => field.trim());
  if (fields.length !== FIELD_COUNT)
    return { ok: false, rule: `expected ${FIELD_COUNT} fields, got ${fields.length}` };
  const [indexText = '', uuid = '', name = '', total = '', used = '', free = ''] = fields;
  if (!/^\d{1,4}$/.test(indexText)) return { ok: false, rule: 'index is not a small non-negative integer' };
  if (!/^[A-Za-z0-9-]{4,128}$/.test(uuid)) return { ok: false, rule: 'uuid is not an identifier' };
  if (name === '') return { ok: false, rule: 'name is empty' };
  const memory = [total, used, free].map(parseMib);
  if (memory.some((value) => value === undefined))
    return { ok: false, rule: 'memory is not an integer MiB or [N/A]' };
  const [memoryTotalMib = null, memoryUsedMib = null, memoryFreeMib = null] = memory as (number | null)[];
  return {
    ok: true,
    gpu: { index: Number(indexText), uuid, name, memoryTotalMib, memoryUsedMib, memoryFreeMib },
  };
}

/** An integer MiB, `null` for a placeholder such as `[N/A]`, `undefined` for anything else. */
function parseMib(text: string): number | null | undefined {
  if (NOT_A_VALUE.has(text)) return null;
  if (!/^\d{1,9}$/.test(text)) return undefined;
  return Number(text);
}

function firstDuplicate(gpus: readonly GpuInfo[]): string | null {
  const indexes = new Set<number>();
  const uuids = new Set<string>();
  for (const gpu of gpus) {
    if (indexes.has(gpu.index)) return `GPU index ${gpu.index} is listed twice`;
    if (uuids.has(gpu.uuid)) return `GPU uuid ${gpu.uuid} is listed twice`;
    indexes.add(gpu.index);
    uuids.add(gpu.uuid);
  }
  return null;
}

function excerpt(text: string): string {
  return text.length <= DETAIL_MAX_CHARS ? text : `${text.slice(0, DETAIL_MAX_CHARS)}…`;
}

export function unobservable(reason: UnobservableReason, detail: string): GpuObservation {
  return { kind: 'unobservable', reason, detail: excerpt(detail) };
}

export type DeclaredTotalComparison = {
  readonly kind: 'match' | 'mismatch' | 'unobservable';
  readonly message: string;
};

const TOLERANCE_FRACTION = 0.01;
const TOLERANCE_FLOOR_MIB = 64;

/**
 * Compares a declared `capacity.gpu_total_mib` with the sum of the observed memory.total.
 * A difference up to the larger of 1% of the declared value and 64 MiB is a match (drivers
 * report slightly different totals); beyond that it is a mismatch. A GPU without a
 * memory.total, or no observation at all, makes the comparison unobservable.
 */
export function compareDeclaredTotal(declaredMib: number, observed: GpuObservation): DeclaredTotalComparison {
  if (observed.kind === 'unobservable') {
    return {
      kind: 'unobservable',
      message: `GPU memory not observable (${observed.reason}): ${observed.detail}`,
    };
  }
  const unknown = observed.gpus.filter((gpu) => gpu.memoryTotalMib === null).map((gpu) => gpu.index);
  if (unknown.length > 0) {
    return { kind: 'unobservable', message: `memory.total not reported for GPU ${unknown.join(', ')}` };
  }
  const observedText = `${observed.totalMib} MiB on ${observed.gpus.length} GPU(s)`;
  if (!Number.isFinite(declaredMib) || declaredMib <= 0) {
    return {
      kind: 'mismatch',
      message: `declared ${declaredMib} MiB is not a positive amount; observed ${observedText}`,
    };
  }
  const toleranceMib = Math.max(declaredMib * TOLERANCE_FRACTION, TOLERANCE_FLOOR_MIB);
  const differenceMib = Math.abs(observed.totalMib - declaredMib);
  if (differenceMib <= toleranceMib) {
    return { kind: 'match', message: `declared ${declaredMib} MiB matches observed ${observedText}` };
  }
  return {
    kind: 'mismatch',
    message: `declared ${declaredMib} MiB, observed ${observedText}${singleGpuHint(declaredMib, observed.gpus)}`,
  };
}

function singleGpuHint(declaredMib: number, gpus: readonly GpuInfo[]): string {
  if (gpus.length < 2) return '';
  const toleranceMib = Math.max(declaredMib * TOLERANCE_FRACTION, TOLERANCE_FLOOR_MIB);
  const one = gpus.find(
    (gpu) => gpu.memoryTotalMib !== null && Math.abs(gpu.memoryTotalMib - declaredMib) <= toleranceMib,
  );
  return one === undefined
    ? ''
    : ` (the declared value matches GPU ${one.index} alone; the comparison is with the sum of all GPUs)`;
}
