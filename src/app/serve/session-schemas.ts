import { z } from 'zod';
import {
  AbsolutePath,
  Argv,
  CallerEnvironment,
  Egress,
  Gpus,
  limitFields,
  NonEmptyString,
  Ports,
} from '../../core/manifest/fields.js';
import { DEFAULT_RUNTIME, RuntimeName } from '../../core/oci-runtime.js';
import { Annotations, CapDrop, ExtraHosts, ImageRef, MountSchema, SecretEnv } from './request-fields.js';

/**
 * The sessions resource of the `serve` API: the create request (its fields reuse the pair-spec field schemas, so a
 * session obeys the same rules as a pair), and the session records it answers with (created, list, detail,
 * keepalive, cleanup).
 */

export const DEFAULT_SESSION_TTL_SECONDS = 3_600;
export const MAX_SESSION_TTL_SECONDS = 7 * 24 * 3_600;
const TTL_RULE = `must be an integer 1..${MAX_SESSION_TTL_SECONDS} (seconds)`;
const LABEL_KEY = /^[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?$/;

export const SessionCreateSchema = z
  .strictObject({
    image: ImageRef,
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
    egress: Egress.optional().meta({
      description:
        'egress policy (docs/spec.md 5.6): {"mode": "none"|"open"|"allowlist", "allow": [...], "methods": [...]}; when given it decides the network (none: none, open: the guarded network, allowlist: only the filtering proxy); absent: network "none" is mode "none", "bridge" is "open". PUT /v1/sessions/{id}/egress changes it',
    }),
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
    if (body.egress !== undefined && body.egress.mode === 'none' && body.network === 'bridge')
      ctx.addIssue({
        code: 'custom',
        message: 'mode "none" contradicts network "bridge" (give one of them)',
        path: ['egress', 'mode'],
      });
    const networked = body.egress !== undefined ? body.egress.mode !== 'none' : body.network === 'bridge';
    if (body.ports.length > 0 && !networked) {
      ctx.addIssue({
        code: 'custom',
        message:
          'published ports need network "bridge" or egress mode "open"/"allowlist" (network "none" publishes nothing)',
        path: ['ports'],
      });
    }
  })
  .meta({ title: 'SessionCreate' });

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

/** The written form of a policy: a session's now (GET), the body and answer of PUT /v1/sessions/{id}/egress. */
export const EgressPolicySchema = Egress.meta({
  title: 'EgressPolicy',
  description:
    '{"mode": "none"|"open"|"allowlist", "allow": ["api.openai.com", "*.anthropic.com", "pypi.internal:8443"], "methods": ["GET", …]} (docs/spec.md 5.6); allow and methods only with "allowlist"',
});

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
  egress: EgressPolicySchema.meta({ description: "the session's egress policy now" }),
}).meta({
  title: 'SessionDetail',
  description: "GET /v1/sessions/{id}: the list's fields and what the engine says of the container now",
});

export const SessionListSchema = z
  .strictObject({ sessions: z.array(SessionInfoSchema) })
  .meta({ title: 'SessionList' });

export const CleanupRecordSchema = z
  .strictObject({
    session_id: z.string(),
    container_id: z.string(),
    reason: z.enum(['deleted', 'expired', 'shutdown', 'adopted_expired', 'exited', 'gone']).meta({
      description:
        'deleted (DELETE), expired (its TTL), shutdown (SIGTERM), adopted_expired (found expired at a restart), exited (its container exited), gone (its container was removed outside roboguide-eval)',
    }),
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

export type SessionCreate = z.output<typeof SessionCreateSchema>;
export type CleanupRecord = z.output<typeof CleanupRecordSchema>;
export type SessionInfo = z.output<typeof SessionInfoSchema>;
export type SessionDetail = z.output<typeof SessionDetailSchema>;
export type EgressPolicyBody = z.output<typeof EgressPolicySchema>;
