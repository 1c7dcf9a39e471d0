import { InvalidInputError, type Issue } from '../../core/errors.js';
import type { Manifest } from '../../core/manifest/schema.js';
import { referencedName, resolveEnvironment } from '../../core/manifest/environment.js';
import type { RegistryAuth } from '../ports/image-pulls.js';

/**
 * Registry credentials of a batch (issue 43): per registry host, `{username, password}` as `${NAME}` references
 * resolved from the environment of the process that pulls (start, each supervisor), or `{docker_config: true}`: the
 * entry for that host in the engine user's `~/.docker/config.json` (`$DOCKER_CONFIG/config.json`). They live in
 * memory only: the engine gets them in `X-Registry-Auth`, every log and journal line masks them (they join the
 * batch's secrets), and nothing of them is written to batch.json, the journal or the report.
 */
export interface RegistryCredentials {
  readonly byHost: ReadonlyMap<string, RegistryAuth>;
  /** Every value to mask (passwords, usernames, tokens, the base64 auth strings). */
  readonly secrets: readonly string[];
}

export const NO_CREDENTIALS: RegistryCredentials = { byHost: new Map(), secrets: [] };

/** The config file's text, or null when there is none (a port: the shell reads `~/.docker/config.json`). */
export type DockerConfigReader = () => Promise<string | null>;

/** No config file: `docker_config` entries are refused. */
export const noDockerConfig: DockerConfigReader = () => Promise.resolve(null);

export async function registryCredentials(
  manifest: Pick<Manifest, 'registries'>,
  environment: Readonly<Record<string, string | undefined>>,
  readDockerConfig: DockerConfigReader,
  options: { readonly allowShortSecrets?: boolean } = {},
): Promise<RegistryCredentials> {
  const registries = manifest.registries ?? {};
  const byHost = new Map<string, RegistryAuth>();
  const secrets = new Set<string>();
  const issues: Issue[] = [];
  let config: DockerConfig | null | undefined;
  for (const [host, entry] of Object.entries(registries)) {
    const path = `registries.${host}`;
    if ('docker_config' in entry) {
      config ??= parseDockerConfig(await readDockerConfig().catch(() => null));
      const found = config?.auths?.[host];
      const decoded = found?.auth !== undefined ? Buffer.from(found.auth, 'base64').toString('utf8') : '';
      const colon = decoded.indexOf(':');
      if (found?.identitytoken !== undefined) {
        byHost.set(host, { identitytoken: found.identitytoken, serveraddress: host });
        secrets.add(found.identitytoken);
      } else if (colon > 0) {
        const auth = {
          username: decoded.slice(0, colon),
          password: decoded.slice(colon + 1),
          serveraddress: host,
        };
        byHost.set(host, auth);
        for (const s of [auth.password, found?.auth ?? '']) if (s !== '') secrets.add(s);
      } else {
        issues.push({
          path: `${path}.docker_config`,
          rule: `~/.docker/config.json has no "auths" entry with "auth" for ${host}`,
        });
      }
      continue;
    }
    for (const key of ['username', 'password'] as const) {
      if (referencedName(entry[key]) === undefined)
        issues.push({
          path: `${path}.${key}`,
          rule: 'must be a ${NAME} reference (credentials never go into the manifest)',
        });
    }
    const r = resolveEnvironment(entry, environment, path, options);
    if (!r.ok) {
      issues.push(...r.issues);
      continue;
    }
    const username = r.values['username'] ?? '';
    const password = r.values['password'] ?? '';
    byHost.set(host, { username, password, serveraddress: host });
    for (const s of r.secrets) secrets.add(s);
    secrets.add(Buffer.from(`${username}:${password}`).toString('base64'));
  }
  if (issues.length > 0)
    throw new InvalidInputError('E_ENV_MISSING', 'the registry credentials cannot be used', issues, {
      suggestions: [
        'export the named variables in the environment that runs start/resume (values of 8+ characters)',
      ],
    });
  return { byHost, secrets: [...secrets] };
}

interface DockerConfig {
  readonly auths?: Readonly<Record<string, { readonly auth?: string; readonly identitytoken?: string }>>;
}

function parseDockerConfig(text: string | null): DockerConfig | null {
  if (text === null) return null;
  try {
    const parsed = JSON.parse(text) as unknown;
    return typeof parsed === 'object' && parsed !== null ? parsed : null;
  } catch {
    return null;
  }
}
