import { z } from 'zod';
import { parseEgress } from '../egress/policy.js';
import {
  DEFAULT_SESSIONS_DIR,
  ENV_NAME_PATTERN,
  MAX_LOG_LIMIT_BYTES,
  MIN_LOG_LIMIT_BYTES,
  JOB_ID_PATTERN,
  MAX_STOP_BUDGET_SECONDS,
  MAX_TIMEOUT_SECONDS,
  RESERVED_ENV_PREFIX,
  SHA256_HEX_PATTERN,
} from './constants.js';
import { environmentProblems } from './environment.js';
import { isCredentialLikePath } from './secrets.js';
import {
  DEFAULT_PIDS_LIMIT,
  MAX_CPUS,
  MAX_DISK_LIMIT_BYTES,
  MAX_MEMORY_MIB,
  MAX_PIDS_LIMIT,
  MIN_DISK_LIMIT_BYTES,
  MIN_MEMORY_MIB,
  MIN_PIDS_LIMIT,
} from '../pair-limits.js';

/** Field schemas shared by the manifest and the `pair run` spec, each with a plain-words rule. */

export const NonEmptyString = z.string().min(1, { error: 'must not be empty' });

export const AbsolutePath = z
  .string()
  .refine((p) => p.startsWith('/'), { error: 'must be an absolute path' })
  .meta({ pattern: '^/' });

/** An absolute path naming a file, not a directory. */
export const AbsoluteFilePath = AbsolutePath.refine((p) => !p.endsWith('/') && !/\/\.{1,2}$/.test(p), {
  error: 'must name a file, not a directory (no trailing "/", ".", "..")',
});

export const JobId = z.string().regex(JOB_ID_PATTERN, {
  error: 'must match [A-Za-z0-9._-]{1,128} and be a single path segment (not "." or "..")',
});

export const Argv = z
  .array(z.string())
  .min(1, { error: 'must be a non-empty array of strings (the program and its arguments; no shell)' })
  .refine((argv) => argv[0] !== '', { error: 'the program (first element) must not be empty', path: [0] });

const PORT_RULE = 'must be an integer 1..65535';
export const Port = z
  .int({ error: PORT_RULE })
  .min(1, { error: PORT_RULE })
  .max(65_535, { error: PORT_RULE });

/**
 * A pair's (or a session's) network, docs/spec.md §5.1: "bridge" is our guarded bridge network (outbound only: no
 * other container, no cloud metadata address, no address of the host), "none" has loopback only.
 */
export const Network = z.enum(['none', 'bridge'], { error: 'must be "none" or "bridge"' });

/**
 * The egress policy (docs/spec.md §5.6): `{"mode": "none"|"open"|"allowlist", "allow": [...], "methods": [...]}`.
 * Every entry is checked by src/core/egress/policy.ts; the first fault is reported on its own path.
 */
export const Egress = z
  .strictObject({
    mode: z.enum(['none', 'open', 'allowlist'], { error: 'must be "none", "open" or "allowlist"' }),
    allow: z
      .array(z.string({ error: 'must be a string' }), { error: 'must be an array of "HOST[:PORT]"' })
      .optional(),
    methods: z
      .array(z.string({ error: 'must be a string' }), { error: 'must be an array of HTTP methods' })
      .optional(),
  })
  .superRefine((value, ctx) => {
    const parsed = parseEgress(value);
    if (parsed.ok) return;
    const path = parsed.field
      .split(/[[\].]/)
      .filter((part) => part !== '')
      .map((part) => (/^\d+$/.test(part) ? Number(part) : part));
    ctx.addIssue({ code: 'custom', path, message: parsed.rule });
  });

/** Uniqueness and disjointness of ports are checked across jobs by cross-rules.ts. */
export const Ports = z.array(Port).meta({ uniqueItems: true });

const TIMEOUT_RULE = `must be an integer 1..${MAX_TIMEOUT_SECONDS} (seconds)`;
export const TimeoutSeconds = z
  .int({ error: TIMEOUT_RULE })
  .min(1, { error: TIMEOUT_RULE })
  .max(MAX_TIMEOUT_SECONDS, { error: TIMEOUT_RULE });

const STOP_BUDGET_RULE = `must be an integer 1..${MAX_STOP_BUDGET_SECONDS} (seconds)`;
export const StopBudgetSeconds = z
  .int({ error: STOP_BUDGET_RULE })
  .min(1, { error: STOP_BUDGET_RULE })
  .max(MAX_STOP_BUDGET_SECONDS, { error: STOP_BUDGET_RULE });

const LOG_LIMIT_RULE = `must be an integer ${MIN_LOG_LIMIT_BYTES}..${MAX_LOG_LIMIT_BYTES} (bytes per stream)`;
export const LogLimitBytes = z
  .int({ error: LOG_LIMIT_RULE })
  .min(MIN_LOG_LIMIT_BYTES, { error: LOG_LIMIT_RULE })
  .max(MAX_LOG_LIMIT_BYTES, { error: LOG_LIMIT_RULE });

export const SessionsDir = AbsolutePath.default(DEFAULT_SESSIONS_DIR);

export const Gpus = z.union(
  [
    z.literal('all'),
    z.int().min(1, { error: 'a GPU count must be an integer ≥ 1' }),
    z
      .array(NonEmptyString)
      .min(1, { error: 'a device list must not be empty' })
      .superRefine((ids, ctx) => reportDuplicates(ids, ctx, (id) => `device "${id}" is listed twice`))
      .meta({ uniqueItems: true }),
  ],
  { error: 'must be "all", a GPU count ≥ 1, or a non-empty array of device indexes/UUIDs' },
);

const PLACEMENT_RULE =
  'must be a swarm constraint ATTRIBUTE==VALUE or ATTRIBUTE!=VALUE on node.id, node.hostname, node.role, node.platform.os, node.platform.arch, node.labels.NAME or engine.labels.NAME';
/** Swarm placement constraints (issue 13), passed through to the service; at most 16. */
export const Placement = z
  .array(
    z
      .string({ error: PLACEMENT_RULE })
      .regex(
        /^(node\.(id|hostname|role|platform\.os|platform\.arch|labels\.[A-Za-z0-9._-]+)|engine\.labels\.[A-Za-z0-9._-]+) ?(==|!=) ?[A-Za-z0-9._:/-]+$/,
        { error: PLACEMENT_RULE },
      ),
  )
  .max(16, { error: 'at most 16 placement constraints' });

const HTTP_STATUS_RULE = 'must be an integer HTTP status 100..599';
export const AllowedHttpStatuses = z
  .array(
    z
      .int({ error: HTTP_STATUS_RULE })
      .min(100, { error: HTTP_STATUS_RULE })
      .max(599, { error: HTTP_STATUS_RULE }),
  )
  .superRefine((codes, ctx) => reportDuplicates(codes, ctx, (code) => `status ${code} is listed twice`))
  .meta({ uniqueItems: true });

/**
 * The serve API's environment (session `environment`, exec `env`, issue 23): like Environment, but a literal value
 * is accepted under any name (secret-looking ones are masked by the server and never written to disk).
 */
export const CallerEnvironment = z
  .record(z.string(), z.string())
  .superRefine((env, ctx) => {
    for (const problem of environmentProblems(env, { literalSecrets: true })) {
      ctx.addIssue({ code: 'custom', message: problem.rule, path: [problem.name] });
    }
  })
  .meta({
    description:
      'literal values, or "${NAME}" (the whole value) for a server variable named with serve --allow-env; a value under a secret-looking name (or one listed in secret_env) is masked in all output and never written to disk',
    propertyNames: {
      type: 'string',
      pattern: `^(?!${RESERVED_ENV_PREFIX})${ENV_NAME_PATTERN.source.slice(1)}`,
    },
  });

export const Environment = z
  .record(z.string(), z.string())
  .superRefine((env, ctx) => {
    for (const problem of environmentProblems(env)) {
      ctx.addIssue({ code: 'custom', message: problem.rule, path: [problem.name] });
    }
  })
  .meta({
    description:
      'public configuration; a secret must be referenced from the supervisor environment as the whole value "${NAME}"',
    propertyNames: {
      type: 'string',
      pattern: `^(?!${RESERVED_ENV_PREFIX})${ENV_NAME_PATTERN.source.slice(1)}`,
    },
  });

const SHA256_RULE = 'must be 64 lower-case hex digits (SHA-256)';
export const SourceSha256 = z
  .record(z.string(), z.string())
  .superRefine((hashes, ctx) => {
    for (const [path, digest] of Object.entries(hashes)) {
      const rule = sourcePathRule(path) ?? (SHA256_HEX_PATTERN.test(digest) ? undefined : SHA256_RULE);
      if (rule !== undefined) ctx.addIssue({ code: 'custom', message: rule, path: [path] });
    }
  })
  .meta({
    description: 'absolute paths of public input files to their SHA-256; credential-like files are rejected',
    propertyNames: { type: 'string', pattern: '^/' },
    additionalProperties: { type: 'string', pattern: SHA256_HEX_PATTERN.source },
  });

function sourcePathRule(path: string): string | undefined {
  if (!path.startsWith('/')) return 'must be an absolute path';
  if (isCredentialLikePath(path)) return 'looks like a credential file; only public files may be listed';
  return undefined;
}

interface IssueSink {
  addIssue(issue: { code: 'custom'; message: string; path: PropertyKey[] }): void;
}

function reportDuplicates<T>(items: readonly T[], ctx: IssueSink, rule: (item: T) => string): void {
  const seen = new Set<T>();
  items.forEach((item, index) => {
    if (seen.has(item)) ctx.addIssue({ code: 'custom', message: rule(item), path: [index] });
    seen.add(item);
  });
}

const PIDS_RULE = `must be an integer ${MIN_PIDS_LIMIT}..${MAX_PIDS_LIMIT} (processes and threads)`;
/** The pids cgroup of the pair's container (issue 22). */
export const PidsLimit = z
  .int({ error: PIDS_RULE })
  .min(MIN_PIDS_LIMIT, { error: PIDS_RULE })
  .max(MAX_PIDS_LIMIT, { error: PIDS_RULE });

const MEMORY_RULE = `must be an integer ${MIN_MEMORY_MIB}..${MAX_MEMORY_MIB} (MiB)`;
/** The memory limit (MiB); swap is never allowed beyond it. */
export const MemoryMib = z
  .int({ error: MEMORY_RULE })
  .min(MIN_MEMORY_MIB, { error: MEMORY_RULE })
  .max(MAX_MEMORY_MIB, { error: MEMORY_RULE });

const CPUS_RULE = `must be a number 0.001..${MAX_CPUS} (CPUs)`;
export const Cpus = z
  .number({ error: CPUS_RULE })
  .min(0.001, { error: CPUS_RULE })
  .max(MAX_CPUS, { error: CPUS_RULE });

const DISK_RULE = `must be an integer ${MIN_DISK_LIMIT_BYTES}..${MAX_DISK_LIMIT_BYTES} (bytes)`;
/** Bytes the pair may hold in its cwd, outcome folder and writable layer together (measured, not a quota). */
export const DiskLimitBytes = z
  .int({ error: DISK_RULE })
  .min(MIN_DISK_LIMIT_BYTES, { error: DISK_RULE })
  .max(MAX_DISK_LIMIT_BYTES, { error: DISK_RULE });

/** The limit fields of a job, a `pair run` spec and a serve session (absent: the defaults of src/core/pair-limits.ts). */
export const limitFields = {
  pids_limit: PidsLimit.optional().meta({
    description: `processes and threads in the container (pids cgroup); default ${DEFAULT_PIDS_LIMIT}`,
  }),
  memory_mib: MemoryMib.optional().meta({
    description:
      'memory limit (MiB), no swap beyond it; default: (host memory − reserve) / the pairs allowed at once',
  }),
  cpus: Cpus.optional().meta({ description: 'CPU quota (e.g. 1.5); default none (a fair share)' }),
  disk_limit_bytes: DiskLimitBytes.optional().meta({
    description:
      "bytes in cwd + outcome folder + writable layer, measured; past it the pair is stopped (reason disk_limit_exceeded); default: a share of the output file system's free space",
  }),
};
