import { ApiError } from '../../app/serve/api-error.js';
import { IMAGE_REF_RULE } from '../../app/serve/request-fields.js';
import { isImageReference } from '../../core/image-build.js';
import { unallowedReferences } from '../../app/serve/env-allow.js';
import type { ImagePulls } from '../../app/ports/image-pulls.js';
import type { Logger } from '../../app/ports/logger.js';
import { referencedName, resolveEnvironment } from '../../core/manifest/environment.js';
import { registryHostOf } from '../../core/image-plan.js';
import { textRedactor } from '../../core/redaction/redact-text.js';
import type { RouteContext, Router } from './http-kit.js';
import { readJson } from './json-body.js';

export interface ImagePullRouteDeps {
  readonly pulls: ImagePulls;
  /** The server's variables a caller may reference (`serve --allow-env`). */
  readonly environment: Readonly<Record<string, string>>;
  readonly allowedEnv: ReadonlySet<string>;
  readonly logger: Logger;
}

/**
 * POST /v1/images/pull (issue 43): body `{image, credentials?: {username, password}}`, the credentials as `${NAME}`
 * references to variables the server allows (`--allow-env`), never literal. They reach the engine only in
 * `X-Registry-Auth`. The answer is NDJSON: `{"progress": {status, id?, current?, total?}}` lines as the engine pulls,
 * then `{"image": {ref, id, bytes}}` or `{"error": {code: "E_IMAGE_PULL_FAILED", message}}` (masked).
 */
async function pullImage(deps: ImagePullRouteDeps, { req, res, clientGone }: RouteContext): Promise<void> {
  const body = await readJson(req);
  const image =
    typeof body === 'object' && body !== null ? (body as Record<string, unknown>)['image'] : undefined;
  if (typeof image !== 'string' || !isImageReference(image))
    throw ApiError.invalid('the pull request', [{ path: 'image', rule: IMAGE_REF_RULE }]);
  const credentials = (body as Record<string, unknown>)['credentials'];
  let auth: { username: string; password: string; serveraddress: string } | undefined;
  let secrets: string[] = [];
  if (credentials !== undefined) {
    const c = credentials as Record<string, unknown>;
    const username = c['username'];
    const password = c['password'];
    if (
      typeof credentials !== 'object' ||
      credentials === null ||
      typeof username !== 'string' ||
      typeof password !== 'string'
    )
      throw ApiError.invalid('the pull request', [
        { path: 'credentials', rule: 'must be {username, password}, each a ${NAME} reference' },
      ]);
    const refs = { username, password };
    const literal = Object.entries(refs)
      .filter(([, v]) => referencedName(v) === undefined)
      .map(([k]) => ({
        path: `credentials.${k}`,
        rule: 'must be a ${NAME} reference (never a literal credential)',
      }));
    const issues = [...literal, ...unallowedReferences(refs, deps.allowedEnv, 'credentials')];
    if (issues.length > 0) throw ApiError.invalid('the pull request', issues);
    const resolved = resolveEnvironment(refs, deps.environment, 'credentials');
    if (!resolved.ok) throw ApiError.invalid('the pull request', resolved.issues);
    auth = {
      username: resolved.values['username'] ?? '',
      password: resolved.values['password'] ?? '',
      serveraddress: registryHostOf(image),
    };
    secrets = [...resolved.secrets, Buffer.from(`${auth.username}:${auth.password}`).toString('base64')];
  }
  const redact = textRedactor(secrets);
  res.writeHead(200, { 'content-type': 'application/x-ndjson' });
  const write = (event: unknown): void => void res.write(`${JSON.stringify(event)}\n`);
  const abandon = new AbortController();
  clientGone.addEventListener('abort', () => abandon.abort(), { once: true });
  try {
    await deps.pulls.pull(
      image,
      auth,
      (p) =>
        write({
          progress: {
            status: redact(p.status ?? ''),
            ...(p.id !== undefined ? { id: p.id } : {}),
            ...(p.progressDetail?.current !== undefined ? { current: p.progressDetail.current } : {}),
            ...(p.progressDetail?.total !== undefined ? { total: p.progressDetail.total } : {}),
          },
        }),
      abandon.signal,
    );
    const facts = await deps.pulls.facts(image);
    write({ image: { ref: image, id: facts?.id ?? null, bytes: facts?.bytes ?? null } });
    deps.logger.info({ image }, 'image pulled');
  } catch (err) {
    const message = redact(err instanceof Error ? err.message : String(err)).slice(0, 500);
    deps.logger.warn({ image, message }, 'image pull failed');
    write({ error: { code: 'E_IMAGE_PULL_FAILED', message } });
  }
  res.end();
}

export function registerImagePullRoute(router: Router, deps: ImagePullRouteDeps): void {
  router.add('POST', '/v1/images/pull', (ctx) => pullImage(deps, ctx));
}
