/** The start check that every OCI runtime the manifest asks for is registered with the engine (and usable). */
import type { Issue } from '../../core/errors.js';
import { jobRuntime } from '../../core/manifest/parse.js';
import type { Manifest } from '../../core/manifest/schema.js';
import { gvisorSessionsDirProblem, isGvisor, runtimeProblem } from '../../core/oci-runtime.js';
import type { EngineInfo } from '../ports/container-runtime.js';

/**
 * Every runtime the manifest asks for must be registered with the engine, and GPUs under gVisor need its GPU proxy
 * (src/core/oci-runtime.ts). One issue per job (its own field, else the manifest's `runtime`), all at once.
 */
export function runtimeIssues(
  manifest: Manifest,
  engine: Pick<EngineInfo, 'runtimes' | 'runtimeDetails'>,
): Issue[] {
  const registered = engine.runtimeDetails ?? engine.runtimes.map((name) => ({ name, path: '', args: [] }));
  const issues: Issue[] = [];
  const batchWide = new Set<string>();
  manifest.jobs.forEach((job, i) => {
    const runtime = jobRuntime(manifest, job);
    const problem = runtimeProblem(runtime, registered, job.gpus !== undefined);
    const gvisor = registered.find((r) => r.name === runtime);
    const sessions =
      problem === null && gvisor !== undefined && isGvisor(gvisor)
        ? gvisorSessionsDirProblem(job.sessions_dir ?? manifest.sessions_dir)
        : null;
    if (sessions !== null)
      issues.push({
        path: job.sessions_dir !== undefined ? `jobs[${i}].sessions_dir` : 'sessions_dir',
        rule: sessions,
      });
    if (problem === null) return;
    const path =
      job.runtime !== undefined
        ? `jobs[${i}].runtime`
        : problem.startsWith('gpus')
          ? `jobs[${i}].gpus`
          : 'runtime';
    if (path === 'runtime') {
      if (batchWide.has(problem)) return;
      batchWide.add(problem);
    }
    issues.push({ path, rule: problem });
  });
  return issues;
}
