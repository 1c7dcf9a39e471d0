import { execFile } from 'node:child_process';
import {
  NVIDIA_SMI_QUERY_ARGS,
  parseNvidiaSmi,
  unobservable,
  type GpuObservation,
} from '../core/gpu/nvidia-smi-parse.js';

export const DEFAULT_NVIDIA_SMI_TIMEOUT_MS = 10_000;
const MAX_OUTPUT_BYTES = 1024 * 1024;

interface ExecOutcome {
  readonly error: (Error & { code?: unknown; killed?: boolean; signal?: NodeJS.Signals | null }) | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Asks nvidia-smi (default: `nvidia-smi` from PATH) for every GPU's index, uuid, name and
 * memory. Never throws: a missing binary, a non-zero exit, a timeout or output that is not
 * the expected CSV becomes an `unobservable` observation with a reason.
 */
export async function observeGpus(
  options: { binary?: string; timeoutMs?: number } = {},
): Promise<GpuObservation> {
  const binary = options.binary ?? 'nvidia-smi';
  const timeoutMs = options.timeoutMs ?? DEFAULT_NVIDIA_SMI_TIMEOUT_MS;
  const outcome = await run(binary, timeoutMs);
  if (outcome.error === null) return parseNvidiaSmi(outcome.stdout);
  return classifyFailure(binary, timeoutMs, outcome);
}

function run(binary: string, timeoutMs: number): Promise<ExecOutcome> {
  return new Promise((resolve) => {
    try {
      execFile(
        binary,
        [...NVIDIA_SMI_QUERY_ARGS],
        {
          timeout: timeoutMs,
          killSignal: 'SIGKILL',
          maxBuffer: MAX_OUTPUT_BYTES,
          encoding: 'utf8',
          windowsHide: true,
        },
        (error, stdout, stderr) => resolve({ error, stdout, stderr }),
      );
    } catch (error) {
      // execFile throws synchronously for invalid arguments (e.g. a NUL byte in the path).
      resolve({ error: error instanceof Error ? error : new Error(String(error)), stdout: '', stderr: '' });
    }
  });
}

function classifyFailure(binary: string, timeoutMs: number, outcome: ExecOutcome): GpuObservation {
  const { error, stdout, stderr } = outcome;
  if (error === null) return parseNvidiaSmi(stdout);
  const code = error.code;
  if (code === 'ENOENT') return unobservable('binary_missing', `${binary}: not found`);
  if (code === 'EACCES') return unobservable('binary_missing', `${binary}: not executable (EACCES)`);
  if (code === 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER') {
    return unobservable('garbage', `${binary}: output larger than ${MAX_OUTPUT_BYTES} bytes`);
  }
  if (error.killed === true && error.signal === 'SIGKILL') {
    return unobservable('timeout', `${binary}: no answer within ${timeoutMs} ms`);
  }
  const firstLine = firstNonEmptyLine(`${stderr}\n${stdout}`);
  if (/no devices were found/i.test(`${stdout}\n${stderr}`)) return unobservable('no_gpus', firstLine);
  const status =
    typeof code === 'number'
      ? `exit ${code}`
      : error.signal
        ? `signal ${error.signal}`
        : typeof code === 'string'
          ? code
          : error.message;
  return unobservable('nonzero_exit', `${binary}: ${status}${firstLine === '' ? '' : `: ${firstLine}`}`);
}

function firstNonEmptyLine(text: string): string {
  return (
    text
      .split(/\r?\n/)
      .map((line) => line.trim())
      .find((line) => line !== '') ?? ''
  );
}
