import type { Issue } from '../errors.js';
import { B1_PORT_COUNT } from './constants.js';
import { joinPath, ROOT_PATH } from './issue-path.js';
import { declaresNoGpus } from '../cpu-only-admission.js';

/**
 * Rules that span fields or jobs, checked on the raw JSON so they are reported together with
 * field errors (a zod refinement would be skipped once any field of the object is invalid).
 * Values of the wrong type are skipped here: the schema already reports them.
 */
type Raw = Readonly<Record<string, unknown>>;

function isRaw(value: unknown): value is Raw {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isPort(value: unknown): value is number {
  return Number.isInteger(value) && (value as number) >= 1 && (value as number) <= 65_535;
}

function jobLabel(index: number, job: Raw): string {
  const ref = `jobs[${index}]`;
  return typeof job.job_id === 'string' ? `${ref} (${job.job_id})` : ref;
}

export function manifestCrossIssues(manifest: unknown): Issue[] {
  if (!isRaw(manifest)) return [];
  const jobs = Array.isArray(manifest.jobs) ? (manifest.jobs as unknown[]) : [];
  const issues: Issue[] = [];
  const jobIds = new Map<string, number>();
  const outcomes = new Map<string, number>();
  const portOwners = new Map<number, number>();
  jobs.forEach((job, index) => {
    if (!isRaw(job)) return;
    const base = joinPath(ROOT_PATH, 'jobs', index);
    issues.push(...uniqueFieldIssues(jobIds, 'job_id', job, index, jobs));
    issues.push(...uniqueFieldIssues(outcomes, 'outcome_path', job, index, jobs));
    issues.push(...portIssues(job, base, index, jobs, portOwners));
    issues.push(...b1PortsIssues(job, base));
    issues.push(...networkIssues(job, base, manifest.egress));
    if (job.image === undefined && manifest.image === undefined) {
      issues.push({ path: joinPath(base, 'image'), rule: 'is required (no top-level default image)' });
    }
  });
  issues.push(...capacityIssues(manifest.capacity, manifest.jobs));
  return issues;
}

/** Within-spec rules of a `pair run` spec (one job at the root). */
export function pairSpecCrossIssues(spec: unknown): Issue[] {
  if (!isRaw(spec)) return [];
  return [
    ...portIssues(spec, ROOT_PATH, 0, [spec], new Map()),
    ...b1PortsIssues(spec, ROOT_PATH),
    ...networkIssues(spec, ROOT_PATH),
  ];
}

/** Network "none" publishes nothing (the engine accepts the ports silently): published ports need "bridge". */
function networkIssues(job: Raw, base: string, manifestEgress?: unknown): Issue[] {
  const egress = isRaw(job.egress) ? job.egress : isRaw(manifestEgress) ? manifestEgress : undefined;
  if (job.network === 'none' && egress !== undefined && egress.mode !== 'none')
    return [
      {
        path: joinPath(base, isRaw(job.egress) ? 'egress' : 'network'),
        rule: 'network "none" reaches nothing: egress must be mode "none" (or leave network out)',
      },
    ];
  if (job.network !== 'none' || !Array.isArray(job.ports) || job.ports.length === 0) return [];
  return [
    {
      path: joinPath(base, 'ports'),
      rule: 'published ports need network "bridge" (network "none" publishes nothing)',
    },
  ];
}

/** A string field that must differ across jobs; the first job using a value owns it. */
function uniqueFieldIssues(
  owners: Map<string, number>,
  field: 'job_id' | 'outcome_path',
  job: Raw,
  index: number,
  jobs: readonly unknown[],
): Issue[] {
  const value = job[field];
  if (typeof value !== 'string') return [];
  const owner = owners.get(value);
  if (owner === undefined) {
    owners.set(value, index);
    return [];
  }
  const path = joinPath(ROOT_PATH, 'jobs', index, field);
  return [{ path, rule: `${field} is also used by ${jobLabel(owner, jobs[owner] as Raw)}` }];
}

/** Ports unique within the job and disjoint across all jobs (first owner wins). */
function portIssues(
  job: Raw,
  base: string,
  index: number,
  jobs: readonly unknown[],
  owners: Map<number, number>,
): Issue[] {
  if (!Array.isArray(job.ports)) return [];
  const issues: Issue[] = [];
  const own = new Set<number>();
  (job.ports as unknown[]).forEach((port, k) => {
    if (!isPort(port)) return;
    const path = joinPath(base, 'ports', k);
    if (own.has(port)) {
      issues.push({ path, rule: `port ${port} is listed twice` });
      return;
    }
    own.add(port);
    const owner = owners.get(port);
    if (owner === undefined) owners.set(port, index);
    else issues.push({ path, rule: `port ${port} is also used by ${jobLabel(owner, jobs[owner] as Raw)}` });
  });
  return issues;
}

function b1PortsIssues(job: Raw, base: string): Issue[] {
  if (job.b1_ports !== true) return [];
  const count = Array.isArray(job.ports) ? job.ports.length : 0;
  if (count === B1_PORT_COUNT) return [];
  return [
    {
      path: joinPath(base, 'b1_ports'),
      rule: `b1_ports requires exactly ${B1_PORT_COUNT} ports; the job has ${count}`,
    },
  ];
}

const TWO_WORKER_FIELDS = ['gpu_total_mib', 'gpu_baseline_mib', 'gpu_fraction'] as const;

/**
 * `max_workers: 2` on a batch that uses GPUs (a job's `gpus` or `gpu_mib`, or any GPU field here) needs all three GPU
 * fields (the seed rule). A batch that declares no GPUs needs none: it is admitted by memory and CPU (issue 40).
 */
function capacityIssues(capacity: unknown, jobs: unknown): Issue[] {
  if (!isRaw(capacity) || capacity.max_workers !== 2) return [];
  const rawJobs = Array.isArray(jobs) ? jobs.filter(isRaw) : [];
  if (declaresNoGpus(rawJobs, capacity)) return [];
  return TWO_WORKER_FIELDS.filter((field) => capacity[field] === undefined).map((field) => ({
    path: joinPath(ROOT_PATH, 'capacity', field),
    rule: "is required when max_workers is 2 and the batch uses GPUs (a job's gpus or gpu_mib, or a GPU field here)",
  }));
}
