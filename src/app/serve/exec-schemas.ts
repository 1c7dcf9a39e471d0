import { z } from 'zod';
import { Argv, CallerEnvironment, NonEmptyString } from '../../core/manifest/fields.js';
import { ApiErrorBody } from './error-schema.js';
import { ContainerPath, SecretEnv } from './request-fields.js';

/** The exec resource of the `serve` API: the request, its buffered result and the lines of its NDJSON stream. */

const TIMEOUT_RULE = 'must be a number of seconds > 0';

/**
 * What one exec may hand the kernel (execve): each argument at most MAX_ARG_STRLEN (128 KiB with its NUL), and the
 * arguments and environment together at most ARG_MAX with the default 8 MiB stack (2 MiB, counting each string's NUL
 * and pointer). More can never run (E2BIG), and past the engine's 4 MiB message limit the engine answers with an
 * error inside the output: refused here, before the engine is asked.
 */
export const MAX_ARG_BYTES = 128 * 1024;
export const MAX_EXEC_ARGS_BYTES = 2 * 1024 * 1024;

/** Bytes execve counts for these strings: each one's UTF-8, its NUL and its pointer. */
function execveBytes(strings: readonly string[]): number {
  let total = 0;
  for (const text of strings) total += Buffer.byteLength(text) + 1 + 8;
  return total;
}
/**
 * Standard base64's characters, then at most two `=`; that its length is a multiple of 4 is checked apart. One
 * character class, not groups of four: on 4 MB that form took V8 0.35 s of the event loop (issue 39), this one 0.02.
 */
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const BASE64_RULE = 'must be standard base64 (A-Z a-z 0-9 + /, padded with =)';

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
      .regex(BASE64, { error: BASE64_RULE })
      .refine((text) => text.length % 4 === 0, { error: BASE64_RULE })
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
    const argv = body.argv ?? (body.command === undefined ? [] : ['/bin/sh', '-c', body.command]);
    const long = argv.findIndex((arg) => Buffer.byteLength(arg) >= MAX_ARG_BYTES);
    if (long >= 0) {
      ctx.addIssue({
        code: 'custom',
        message: `must be shorter than ${MAX_ARG_BYTES} bytes each (the kernel's limit of one argument)`,
        path: body.argv === undefined ? ['command'] : ['argv', long],
      });
    }
    const env = Object.entries(body.env ?? {}).map(([k, v]) => `${k}=${typeof v === 'string' ? v : ''}`);
    if (execveBytes(argv) + execveBytes(env) > MAX_EXEC_ARGS_BYTES) {
      ctx.addIssue({
        code: 'custom',
        message: `with env, at most ${MAX_EXEC_ARGS_BYTES} bytes in all, counting 9 bytes more for each string (the kernel's limit of arguments and environment)`,
        path: [body.argv === undefined ? 'command' : 'argv'],
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

const Interrupted = z.enum(['server_stopping', 'session_ended']).nullable().meta({
  description:
    'why the server cut the exec short, or null: server_stopping (a SIGTERM: every session is being deleted), session_ended (its container exited or was removed while the exec ran)',
});

export const ExecResultSchema = z
  .strictObject({
    stdout: z.string(),
    stderr: z.string(),
    return_code: z.int(),
    timed_out: z.boolean(),
    duration_ms: z.number(),
    truncated: z.boolean().meta({ description: "an output exceeded the server's per-exec cap and was cut" }),
    interrupted: Interrupted,
  })
  .meta({ title: 'ExecResult' });

export const ExecEventSchema = z
  .union([
    z.strictObject({ stream: z.enum(['stdout', 'stderr']), data: z.string() }),
    z.strictObject({
      exit: z.strictObject({
        return_code: z.int(),
        timed_out: z.boolean(),
        duration_ms: z.number(),
        interrupted: Interrupted,
      }),
    }),
    z
      .strictObject({
        error: ApiErrorBody,
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

export type ExecRequest = z.output<typeof ExecSchema>;
export type ExecResult = z.output<typeof ExecResultSchema>;
