import type { Issue } from '../../core/errors.js';
import { referencedName, resolveEnvironment } from '../../core/manifest/environment.js';
import { joinPath } from '../../core/manifest/issue-path.js';
import {
  isSecretLookingName,
  isUrlWithPassword,
  MIN_SECRET_VALUE_LENGTH,
} from '../../core/manifest/secrets.js';
import { ApiError } from './api-error.js';
import { unallowedReferences } from './env-allow.js';

/**
 * Secrets from callers (issue 23): a session's `environment` or an exec's `env` may hold literal values. A value is a
 * secret when it is a resolved `${NAME}` reference, when its name looks secret (the manifest's name rule), when it is
 * a URL with a password, or when the caller lists its name in `secret_env`. Secrets are masked in everything the
 * server sends or writes, and never written to disk: session.json keeps `{"secret": true}` in their place.
 */

/** What session.json keeps of one variable: a public literal or a `${NAME}` reference as given, a secret as a marker. */
export type StoredEnvValue = string | { readonly secret: true };

export interface CallerEnvironment {
  /** The values the container (or the exec) gets: memory only. */
  readonly values: Record<string, string>;
  /** The values to mask (resolved references and secret literals long enough to mask). */
  readonly secrets: string[];
  /** What may be written to disk. */
  readonly stored: Record<string, StoredEnvValue>;
}

export const SECRET_MARKER = { secret: true } as const;

/**
 * The longest value masked as a secret, and the most secret bytes one session masks in all (issue 39). Every form of
 * every secret (raw, JSON, URL, hex, base64 at three alignments, UTF-16) is compiled into one automaton, on the
 * server's event loop, whenever a session's set of secrets changes: about 0.55 s for one 4,096-byte value, and a
 * value of 1 MB took the server down (out of memory). A longer secret goes in a file (PUT …/file), not in the
 * environment.
 */
export const MAX_SECRET_VALUE_BYTES = 4096;
export const MAX_SESSION_SECRET_BYTES = 16_384;

/** The bytes of a set of secrets, as the masking counts them (UTF-8). */
export function secretBytes(secrets: Iterable<string>): number {
  let total = 0;
  for (const secret of secrets) total += Buffer.byteLength(secret);
  return total;
}

/** The rule a session's secrets, with `added`, break (null: within MAX_SESSION_SECRET_BYTES). */
export function sessionSecretsProblem(held: readonly string[], added: readonly string[]): string | null {
  const fresh = added.filter((secret) => !held.includes(secret));
  if (secretBytes(held) + secretBytes(fresh) <= MAX_SESSION_SECRET_BYTES) return null;
  return `the secrets masked in one session are at most ${MAX_SESSION_SECRET_BYTES} bytes in all (${secretBytes(held)} held, ${secretBytes(fresh)} more asked); pass large secrets in a file`;
}

/** Whether a literal under `name` is a secret: listed by the caller, a secret-looking name, or a URL with a password. */
export function isCallerSecret(name: string, value: string, listed: ReadonlySet<string>): boolean {
  return listed.has(name) || isSecretLookingName(name) || isUrlWithPassword(name, value);
}

/**
 * Checks and resolves a caller's environment (`field`: "environment" or "env"; `listField`: where `secret_env` is).
 * 400 for a reference the server does not allow or cannot resolve, and for a value listed in `secret_env` too short
 * to mask safely. A value that is secret only by its name and shorter than MIN_SECRET_VALUE_LENGTH is passed on but
 * not masked (masking every "1" would wreck all output); it is still never written to disk.
 */
export function callerEnvironment(
  env: Readonly<Record<string, string>>,
  secretEnv: readonly string[],
  source: Readonly<Record<string, string | undefined>>,
  allowed: ReadonlySet<string>,
  fields: { readonly env: string; readonly secretEnv: string },
): CallerEnvironment {
  const notAllowed = unallowedReferences(env, allowed, fields.env);
  if (notAllowed.length > 0)
    throw new ApiError(
      400,
      'E_ENV_NOT_ALLOWED',
      `the ${fields.env} references variables this server does not allow`,
      notAllowed,
    );
  const resolved = resolveEnvironment(env, source, fields.env);
  if (!resolved.ok)
    throw new ApiError(400, 'E_ENV_MISSING', `the ${fields.env} references unset variables`, resolved.issues);
  const listed = new Set(secretEnv);
  const secrets = new Set(resolved.secrets);
  const stored: Record<string, StoredEnvValue> = {};
  const issues: Issue[] = [];
  for (const [name, given] of Object.entries(env)) {
    if (referencedName(given) !== undefined) {
      stored[name] = given;
      continue;
    }
    if (!isCallerSecret(name, given, listed)) {
      stored[name] = given;
      continue;
    }
    stored[name] = SECRET_MARKER;
    const length = [...given].length;
    if (length >= MIN_SECRET_VALUE_LENGTH) secrets.add(given);
    else if (listed.has(name) && length > 0) {
      issues.push({
        path: joinPath(fields.env, name),
        rule: `is listed in ${fields.secretEnv} but shorter than ${MIN_SECRET_VALUE_LENGTH} characters: too short to mask safely`,
      });
    }
  }
  // Checked before any secret is kept: a refused request leaves the session's masking as it was.
  for (const [name, value] of Object.entries(resolved.values)) {
    if (secrets.has(value) && Buffer.byteLength(value) > MAX_SECRET_VALUE_BYTES) {
      issues.push({
        path: joinPath(fields.env, name),
        rule: `is a secret (masked in everything the server sends or writes) of more than ${MAX_SECRET_VALUE_BYTES} bytes: pass a secret this long in a file`,
      });
    }
  }
  if (issues.length === 0) {
    const problem = sessionSecretsProblem([], [...secrets]);
    if (problem !== null) issues.push({ path: fields.env, rule: problem });
  }
  if (issues.length > 0) throw ApiError.invalid(`the ${fields.env}`, issues);
  return { values: resolved.values, secrets: [...secrets], stored };
}

/**
 * The secrets of an adopted session, re-learned from the container's own environment (`docker inspect`
 * Config.Env): every variable session.json marks secret or stores as a `${NAME}` reference, with the same length
 * rule as at creation.
 */
export function relearnedSecrets(
  stored: Readonly<Record<string, StoredEnvValue>>,
  containerEnv: Readonly<Record<string, string>>,
): string[] {
  const secrets = new Set<string>();
  for (const [name, value] of Object.entries(stored)) {
    const secret = typeof value !== 'string' || referencedName(value) !== undefined;
    const actual = Object.hasOwn(containerEnv, name) ? containerEnv[name] : undefined;
    if (secret && actual !== undefined && [...actual].length >= MIN_SECRET_VALUE_LENGTH) secrets.add(actual);
  }
  return [...secrets];
}
