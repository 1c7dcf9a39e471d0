/**
 * `roboguide-eval/adapters`: the technology behind the library's use-cases, for callers that wire their own (the
 * package entry, `src/index.ts`, holds the use-cases and types only). Each is the implementation of a port of
 * `src/app/ports/`; the two wiring helpers build the ones `runPair` and `supervise` take, the way the CLI does.
 */
export { observeGpus } from './adapters/nvidia-smi.js';
export { createRedactStream } from './adapters/redact-stream.js';
export { NodeFileSystem } from './adapters/fs/node-file-system.js';
export { SqliteCapacityRegistry } from './adapters/registry/sqlite-capacity-registry.js';
export { DockerContainerRuntime } from './adapters/docker/docker-container-runtime.js';
export { createExecutePairDeps, createContainerRuntime } from './composition-root.js';
