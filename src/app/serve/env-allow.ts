import type { Issue } from '../../core/errors.js';
import { ENV_NAME_PATTERN, RESERVED_ENV_PREFIX } from '../../core/manifest/constants.js';
import { referencedName } from '../../core/manifest/environment.js';
import { joinPath } from '../../core/manifest/issue-path.js';

/**
 * Which of the server's variables an API caller may reference as `${NAME}` (issue 22): only those the operator
 * named with `serve --allow-env NAME`; none by default. A caller who could reference any variable could read it
 * back past the redactor by transforming it (`rev`, base64) inside the container.
 */

/** Variables that can never be allowed: PostgreSQL's client settings (PGPASSWORD…) and our own. */
const NEVER_ALLOWED = [/^PG/, new RegExp(`^${RESERVED_ENV_PREFIX}`)];

/**
 * Why `--allow-env NAME` is refused, or null: not a variable name, a PostgreSQL or roboguide variable, or a
 * variable holding the bearer token of `--token-file`.
 */
export function allowEnvRefusal(
  name: string,
  environment: Readonly<Record<string, string | undefined>>,
  token: string | undefined,
): string | null {
  if (!ENV_NAME_PATTERN.test(name)) return `${name} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)`;
  if (NEVER_ALLOWED[0]!.test(name))
    return `${name}: PostgreSQL's variables (PG*) are never exposed to callers`;
  if (NEVER_ALLOWED[1]!.test(name))
    return `${name}: the tool's own variables (${RESERVED_ENV_PREFIX}*) are never exposed to callers`;
  const value = Object.hasOwn(environment, name) ? environment[name] : undefined;
  if (token !== undefined && token !== '' && value !== undefined && value.trim() === token)
    return `${name} holds the server's bearer token (--token-file)`;
  return null;
}

/** Issues (400) for every `${NAME}` in `env` whose NAME is not allowed, at `<pathPrefix>.<key>`, naming the variable. */
export function unallowedReferences(
  env: Readonly<Record<string, string>>,
  allowed: ReadonlySet<string>,
  pathPrefix: string,
): Issue[] {
  const issues: Issue[] = [];
  for (const [key, value] of Object.entries(env)) {
    const name = referencedName(value);
    if (name !== undefined && !allowed.has(name)) {
      issues.push({
        path: joinPath(pathPrefix, key),
        rule: `references \${${name}}, which this server does not allow (start it with --allow-env ${name})`,
      });
    }
  }
  return issues;
}

/** The server's environment cut down to the allowed names: what sessions and pairs resolve references from. */
export function allowedEnvironment(
  environment: Readonly<Record<string, string | undefined>>,
  allowed: ReadonlySet<string>,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of allowed) {
    const value = Object.hasOwn(environment, name) ? environment[name] : undefined;
    if (value !== undefined) out[name] = value;
  }
  return out;
}
