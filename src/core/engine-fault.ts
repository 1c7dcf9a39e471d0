/**
 * What a container engine refused or failed to do, as one word: every runtime adapter (Docker, Swarm) maps its
 * engine's errors to one of these once (the runtime port's `EngineError` carries it), and classification turns it
 * into a result reason (`reasonOfEngineFault`), so nothing else parses engine text.
 */
export type EngineFault =
  | 'engine_unavailable'
  | 'image_missing'
  | 'image_pull_failed'
  | 'nvidia_runtime_missing'
  | 'gpu_request_dropped'
  | 'port_allocated'
  | 'engine_error';

/** The result reason of an engine fault: an engine that did not answer is an `engine_error` of the pair. */
export function reasonOfEngineFault(fault: EngineFault): Exclude<EngineFault, 'engine_unavailable'> {
  return fault === 'engine_unavailable' ? 'engine_error' : fault;
}
