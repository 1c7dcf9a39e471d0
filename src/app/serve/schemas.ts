import { z } from 'zod';
import {
  AbsolutePath,
  Argv,
  CallerEnvironment,
  Gpus,
  limitFields,
  NonEmptyString,
  Ports,
} from '../../core/manifest/fields.js';
import { ENV_NAME_PATTERN } from '../../core/manifest/constants.js';
import { PairSpecSchema } from '../../core/manifest/schema.js';
import { DEFAULT_RUNTIME, RuntimeName } from '../../core/oci-runtime.js';

/**
 * Request and response bodies of the `serve` API (issue 12). Request fields reuse the pair-spec field schemas
 * (environment references, GPUs, ports, absolute paths) so a session obeys the same rules as a pair; the
 * OpenAPI document is generated from these, never written by hand.
 */

export const DEFAULT_SESSION_TTL_SECONDS = 3_600;
export const MAX_SESSION_TTL_SECONDS = 7 * 24 * 3_600;
const TTL_RULE = `must be an integer 1..${MAX_SESSION_TTL_SECONDS} (seconds)`;
const LABEL_KEY = /^[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?$/;

export const MountSchema = z.strictObject({
  source: AbsolutePath.meta({
    description: 'host path (must exist; resolved through symlinks before the mount rules apply)',
  }),
  target: AbsolutePath.refine((p) => p !== '/', { error: 'must not be the root directory' }),
  read_only: z.boolean().default(false),
});

/** Linux capabilities a session may drop (`cap_drop`), without the CAP_ prefix; "ALL" drops every one. */
export const LINUX_CAPABILITIES: readonly string[] = [
  'AUDIT_CONTROL',
  'AUDIT_READ',
  'AUDIT_WRITE',
  'BLOCK_SUSPEND',
  'BPF',
  'CHECKPOINT_RESTORE',
  'CHOWN',
  'DAC_OVERRIDE',
  'DAC_READ_SEARCH',
  'FOWNER',
  'FSETID',
  'IPC_LOCK',
  'IPC_OWNER',
  'KILL',
  'LEASE',
  'LINUX_IMMUTABLE',
  'MAC_ADMIN',
  'MAC_OVERRIDE',
  'MKNOD',
  'NET_ADMIN',
  'NET_BIND_SERVICE',
  'NET_BROADCAST',
  'NET_RAW',
  'PERFMON',
  'SETFCAP',
  'SETGID',
  'SETPCAP',
  'SETUID',
  'SYSLOG',
  'SYS_ADMIN',
  'SYS_BOOT',
  'SYS_CHROOT',
  'SYS_MODULE',
  'SYS_NICE',
  'SYS_PACCT',
  'SYS_PTRACE',
  'SYS_RAWIO',
  'SYS_RESOURCE',
  'SYS_TIME',
  'SYS_TTY_CONFIG',
  'WAKE_ALARM',
];
const CAPABILITY_SET = new Set(LINUX_CAPABILITIES);

/** A capability name as the caller wrote it (`NET_RAW`, `CAP_NET_RAW`, `net_raw`, `ALL`), normalized. */
export function capabilityName(name: string): string {
  const upper = name.toUpperCase();
  return upper.startsWith('CAP_') ? upper.slice(4) : upper;
}

const CapDrop = z
  .array(z.string())
  .superRefine((caps, ctx) => {
    caps.forEach((cap, index) => {
      const name = capabilityName(cap);
      if (name !== 'ALL' && !CAPABILITY_SET.has(name))
        ctx.addIssue({
          code: 'custom',
          message: `${JSON.stringify(cap)} is not a Linux capability (e.g. NET_RAW, CAP_CHOWN, or ALL)`,
          path: [index],
        });
    });
  })
  .meta({
    description:
      'capabilities to drop from the session\'s default set (CHOWN, DAC_OVERRIDE, FOWNER, SETUID, SETGID, KILL); "ALL" drops all. Capabilities can never be added',
  });

const HOSTNAME = /^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$/;
const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;
const IPV6 = /^[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*$/;
const EXTRA_HOST_RULE =
  'must be "NAME:IP" or "NAME:host-gateway" (NAME a host name, IP an IPv4 or IPv6 address)';

/** One `extra_hosts` entry: `name:ip` or `name:host-gateway` (the host, as the engine's default bridge reaches it). */
export function extraHostProblem(entry: string): string | null {
  const at = entry.indexOf(':');
  if (at <= 0) return EXTRA_HOST_RULE;
  const name = entry.slice(0, at);
  const address = entry.slice(at + 1);
  if (!HOSTNAME.test(name)) return EXTRA_HOST_RULE;
  if (address === 'host-gateway' || IPV4.test(address) || IPV6.test(address)) return null;
  return EXTRA_HOST_RULE;
}

const ExtraHosts = z
  .array(z.string())
  .superRefine((hosts, ctx) => {
    hosts.forEach((entry, index) => {
      const problem = extraHostProblem(entry);
      if (problem !== null) ctx.addIssue({ code: 'custom', message: problem, path: [index] });
    });
  })
  .meta({ description: 'lines added to the container\'s /etc/hosts: "NAME:IP" or "NAME:host-gateway"' });

const ANNOTATION_KEY_RULE =
  'must be 1..255 printable characters without "=" and must not start with "roboguide." (reserved)';
const Annotations = z
  .record(z.string(), z.string())
  .superRefine((annotations, ctx) => {
    for (const key of Object.keys(annotations)) {
      if (
        key.length === 0 ||
        key.length > 255 ||
        !/^[\x21-\x7e]+$/.test(key) ||
        key.includes('=') ||
        key.toLowerCase().startsWith('roboguide.')
      ) {
        ctx.addIssue({ code: 'custom', message: ANNOTATION_KEY_RULE, path: [key] });
      }
    }
  })
  .meta({
    description:
      "the caller's own metadata, set as container labels verbatim (any key outside roboguide.*, which stays ours)",
  });

const SecretEnv = z
  .array(z.string().regex(ENV_NAME_PATTERN, { error: 'must be a variable name ([A-Za-z_][A-Za-z0-9_]*)' }))
  .meta({
    description:
      'names whose literal values are secrets even when the name does not look secret (masked in all output, never written to disk); names not present are ignored',
  });

export const SessionCreateSchema = z
  .strictObject({
    image: NonEmptyString,
    environment: CallerEnvironment.default({}),
    secret_env: SecretEnv.optional(),
    user: NonEmptyString.optional().meta({
      description:
        "the container's default user (NAME, UID, UID:GID); execs and archives run as it unless they say otherwise",
    }),
    cap_drop: CapDrop.optional(),
    command: Argv.optional().meta({
      description:
        "the container's main command (the image's entrypoint is kept); default: a keep-alive that idles until the session is deleted. The session ends when it exits",
    }),
    annotations: Annotations.optional(),
    extra_hosts: ExtraHosts.optional(),
    gpus: Gpus.optional().meta({ description: '"all" | count | ["0", "GPU-<uuid>"]; absent = no GPU' }),
    ports: Ports.default([]).meta({
      description:
        'container ports published on the same host port (127.0.0.1 by default); needs network "bridge"',
    }),
    mounts: z.array(MountSchema).default([]),
    workdir: AbsolutePath.optional(),
    network: z.enum(['none', 'bridge'], { error: 'must be "none" or "bridge"' }).default('none'),
    runtime: RuntimeName.optional().meta({
      description: `OCI runtime of the session's container (absent: "${DEFAULT_RUNTIME}"); "runsc": gVisor`,
    }),
    cpus: limitFields.cpus,
    pids_limit: limitFields.pids_limit,
    memory_mib: limitFields.memory_mib,
    memory_mb: limitFields.memory_mib.meta({
      description: 'the former name of memory_mib (MiB), still accepted; give only one of them',
    }),
    ttl_seconds: z
      .int({ error: TTL_RULE })
      .min(1, { error: TTL_RULE })
      .max(MAX_SESSION_TTL_SECONDS, { error: TTL_RULE })
      .default(DEFAULT_SESSION_TTL_SECONDS),
    labels: z
      .record(z.string(), z.string())
      .superRefine((labels, ctx) => {
        for (const key of Object.keys(labels)) {
          if (!LABEL_KEY.test(key))
            ctx.addIssue({
              code: 'custom',
              message: 'must be a lower-case label key ([a-z0-9._-])',
              path: [key],
            });
          else if (key.startsWith('roboguide.'))
            ctx.addIssue({
              code: 'custom',
              message: 'keys starting with roboguide. are reserved',
              path: [key],
            });
        }
      })
      .default({}),
  })
  .superRefine((body, ctx) => {
    for (const key of Object.keys(body.annotations ?? {})) {
      if (Object.hasOwn(body.labels, key))
        ctx.addIssue({
          code: 'custom',
          message: 'is also given in labels: give each key once',
          path: ['annotations', key],
        });
    }
    const seen = new Set<number>();
    body.ports.forEach((port, index) => {
      if (seen.has(port))
        ctx.addIssue({ code: 'custom', message: `port ${port} is listed twice`, path: ['ports', index] });
      seen.add(port);
    });
    if (body.memory_mb !== undefined && body.memory_mib !== undefined) {
      ctx.addIssue({
        code: 'custom',
        message: 'give only one of memory_mib and memory_mb (its former name)',
        path: ['memory_mb'],
      });
    }
    if (body.ports.length > 0 && body.network === 'none') {
      ctx.addIssue({
        code: 'custom',
        message: 'published ports need network "bridge" (network "none" publishes nothing)',
        path: ['ports'],
      });
    }
  })
  .meta({ title: 'SessionCreate' });

const TIMEOUT_RULE = 'must be a number of seconds > 0';
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** A path in the container: absolute, or relative to the session's working directory. */
export const ContainerPath = z
  .string()
  .min(1, { error: 'must be a non-empty path' })
  .refine((p) => !p.includes('\0'), { error: 'must not contain NUL' })
  .refine((p) => !p.includes('\n'), { error: 'must not contain a newline' });
export const ExecSchema = z
  .strictObject({
    argv: Argv.optional().meta({
      description: 'the program and its arguments (no shell); exactly one of argv and command',
    }),
    command: NonEmptyString.optional().meta({ description: 'a shell command line, run as `sh -c COMMAND`' }),
    cwd: ContainerPath.optional().meta({
      description:
        "the command's working directory; a relative path is resolved against the session's working directory (its workdir, else the image's WorkingDir, else /)",
    }),
    env: CallerEnvironment.optional(),
    secret_env: SecretEnv.optional(),
    timeout_sec: z
      .number({ error: TIMEOUT_RULE })
      .gt(0, { error: TIMEOUT_RULE })
      .max(172_800, { error: TIMEOUT_RULE })
      .optional(),
    user: NonEmptyString.optional(),
    stdin: z
      .string()
      .optional()
      .meta({ description: "text (UTF-8) written to the command's standard input, then closed" }),
    stdin_base64: z
      .string()
      .regex(BASE64, { error: 'must be standard base64 (A-Z a-z 0-9 + /, padded with =)' })
      .optional()
      .meta({
        description:
          "bytes (base64) written to the command's standard input, then closed; for large stdin use the streamed form (Content-Type: application/vnd.roboguide.exec-stream)",
      }),
  })
  .superRefine((body, ctx) => {
    if ((body.argv === undefined) === (body.command === undefined)) {
      ctx.addIssue({
        code: 'custom',
        message: 'give exactly one of argv and command',
        path: [body.argv === undefined ? 'argv' : 'command'],
      });
    }
    if (body.stdin !== undefined && body.stdin_base64 !== undefined) {
      ctx.addIssue({
        code: 'custom',
        message: 'give at most one of stdin and stdin_base64',
        path: ['stdin_base64'],
      });
    }
  })
  .meta({ title: 'Exec' });

export const ErrorSchema = z
  .strictObject({
    error: z.strictObject({
      code: z.string(),
      message: z.string(),
      issues: z.array(z.strictObject({ path: z.string(), rule: z.string() })),
    }),
  })
  .meta({ title: 'Error' });

export const HealthSchema = z
  .strictObject({
    ok: z.boolean(),
    engine: z.strictObject({ reachable: z.boolean(), version: z.string().nullable() }),
    version: z.string(),
  })
  .meta({ title: 'Health' });

export const ImagePresenceSchema = z
  .strictObject({ ref: z.string(), present: z.boolean() })
  .meta({ title: 'ImagePresence' });

export const SessionCreatedSchema = z
  .strictObject({
    session_id: z.string(),
    container_id: z.string(),
    ports: z.record(z.string(), z.strictObject({ host_ip: z.string(), host_port: z.int() })),
  })
  .meta({ title: 'SessionCreated' });

export const SessionInfoSchema = z
  .strictObject({
    session_id: z.string(),
    container_id: z.string(),
    image: z.string(),
    state: z.enum(['live', 'deleting', 'deleted']),
    created_at: z.string(),
    expires_at: z.string(),
    labels: z.record(z.string(), z.string()),
  })
  .meta({ title: 'SessionInfo' });

export const SessionDetailSchema = SessionInfoSchema.extend({
  workdir: z.string().nullable().meta({
    description:
      "the session's working directory (its own, else the image's); null: unknown (the engine did not answer)",
  }),
  user: z
    .string()
    .nullable()
    .meta({ description: "the container's default user; null: the image's (root when it names none)" }),
  network: z.enum(['none', 'bridge']),
  ip_address: z
    .string()
    .nullable()
    .meta({ description: 'the container\'s address on its network; null without one (network "none")' }),
  ports: z.record(z.string(), z.strictObject({ host_ip: z.string(), host_port: z.int() })),
}).meta({
  title: 'SessionDetail',
  description: "GET /v1/sessions/{id}: the list's fields and what the engine says of the container now",
});

export const SessionListSchema = z
  .strictObject({ sessions: z.array(SessionInfoSchema) })
  .meta({ title: 'SessionList' });

export const ExecResultSchema = z
  .strictObject({
    stdout: z.string(),
    stderr: z.string(),
    return_code: z.int(),
    timed_out: z.boolean(),
    duration_ms: z.number(),
    truncated: z.boolean().meta({ description: "an output exceeded the server's per-exec cap and was cut" }),
  })
  .meta({ title: 'ExecResult' });

export const ExecEventSchema = z
  .union([
    z.strictObject({ stream: z.enum(['stdout', 'stderr']), data: z.string() }),
    z.strictObject({
      exit: z.strictObject({ return_code: z.int(), timed_out: z.boolean(), duration_ms: z.number() }),
    }),
    z
      .strictObject({
        error: z.strictObject({
          code: z.string(),
          message: z.string(),
          issues: z.array(z.strictObject({ path: z.string(), rule: z.string() })),
        }),
      })
      .meta({
        description:
          'the last line when the exec could not finish; E_SLOW_READER: the client read too slowly (past --stream-buffer-cap) and the exec was killed',
      }),
  ])
  .meta({
    title: 'ExecEvent',
    description:
      'one line of the NDJSON stream of POST …/exec?stream=1 (read slowly, the exec waits: backpressure)',
  });

export const ImageBuildEventSchema = z
  .union([
    z.strictObject({ log: z.string() }),
    z.strictObject({
      image: z.strictObject({
        tag: z.string(),
        id: z.string(),
        cached: z.boolean().meta({
          description: 'true: the same context (and Dockerfile path) was built before; answered at once',
        }),
      }),
    }),
    z
      .strictObject({
        error: z.strictObject({
          code: z.string(),
          message: z.string(),
          issues: z.array(z.strictObject({ path: z.string(), rule: z.string() })),
        }),
      })
      .meta({
        description: "the last line when the build failed (E_BUILD_FAILED: the builder's own message)",
      }),
  ])
  .meta({
    title: 'ImageBuildEvent',
    description: 'one line of the NDJSON stream of POST /v1/images: build output, then the image or an error',
  });

export const CleanupRecordSchema = z
  .strictObject({
    session_id: z.string(),
    container_id: z.string(),
    reason: z.enum(['deleted', 'expired', 'shutdown', 'adopted_expired']),
    stopped: z.boolean(),
    removed: z.boolean(),
    verified_absent: z.boolean(),
    slot_released: z.boolean(),
    error: z.string().nullable(),
    finished_at: z.string(),
  })
  .meta({ title: 'CleanupRecord' });

export const KeepaliveSchema = z
  .strictObject({ session_id: z.string(), expires_at: z.string() })
  .meta({ title: 'Keepalive' });

export const ArchiveUploadSchema = z
  .strictObject({ files: z.int(), bytes: z.int() })
  .meta({ title: 'ArchiveUpload' });

export const FileUploadSchema = z
  .strictObject({ path: z.string().meta({ description: 'the file written (absolute)' }), bytes: z.int() })
  .meta({ title: 'FileUpload' });

export const PairAcceptedSchema = z.strictObject({ pair_id: z.string() }).meta({ title: 'PairAccepted' });

export const PairStatusSchema = z
  .strictObject({
    pair_id: z.string(),
    state: z.enum(['running', 'finished', 'failed']),
    receipt: z.record(z.string(), z.unknown()).nullable(),
    result: z
      .record(z.string(), z.unknown())
      .nullable()
      .meta({ description: 'the result.json record; null until the pair has finished' }),
    error: z.string().nullable(),
  })
  .meta({ title: 'PairStatus' });

export { PairSpecSchema };

export type SessionCreate = z.output<typeof SessionCreateSchema>;
export type ExecRequest = z.output<typeof ExecSchema>;
export type CleanupRecord = z.output<typeof CleanupRecordSchema>;
export type SessionInfo = z.output<typeof SessionInfoSchema>;
export type SessionDetail = z.output<typeof SessionDetailSchema>;
export type ExecResult = z.output<typeof ExecResultSchema>;
