import type { EngineFault } from '../../core/engine-fault.js';
import { ExitCode, RoboguideError } from '../../core/errors.js';

/** The container runtime port's failure type carries the one EngineFault word (src/core/engine-fault.ts). */

const CODES = {
  engine_unavailable: 'E_ENGINE_UNAVAILABLE',
  image_missing: 'E_IMAGE_MISSING',
  image_pull_failed: 'E_IMAGE_PULL_FAILED',
  nvidia_runtime_missing: 'E_NVIDIA_RUNTIME_MISSING',
  gpu_request_dropped: 'E_GPU_REQUEST_DROPPED',
  port_allocated: 'E_PORT_ALLOCATED',
  engine_error: 'E_ENGINE',
} as const;

/** A failure of the Docker engine, typed once here so the rest of the code never parses engine text. */
export class EngineError extends RoboguideError {
  readonly fault: EngineFault;
  readonly statusCode: number | null;
  readonly engineMessage: string;
  constructor(
    fault: EngineFault,
    message: string,
    options: { statusCode: number | null; engineMessage: string; cause?: unknown; suggestions?: string[] },
  ) {
    super(CODES[fault], message, {
      cause: options.cause,
      exitCode: fault === 'engine_unavailable' ? ExitCode.engineUnavailable : ExitCode.runtime,
      ...(options.suggestions ? { suggestions: options.suggestions } : {}),
      context: { statusCode: options.statusCode },
    });
    this.fault = fault;
    this.statusCode = options.statusCode;
    this.engineMessage = options.engineMessage;
  }
}
