import { error, json, pathId, ref } from './openapi-path-parts.js';

/** The paths of `serve`'s OpenAPI document for the service itself and for pairs (sessions: openapi-session-paths.ts). */

/** Health, image presence and this document. */
export function servicePaths(): Record<string, unknown> {
  return {
    '/v1/health': {
      get: { operationId: 'health', responses: { '200': json('Health', 'server and engine state') } },
    },
    '/v1/images': {
      get: {
        operationId: 'imageExists',
        parameters: [{ name: 'ref', in: 'query', required: true, schema: { type: 'string' } }],
        responses: { '200': json('ImagePresence', 'whether the engine has the image (no pulls)') },
      },
      post: imageBuildOperation(),
    },
    '/v1/images/pull': {
      post: imagePullOperation(),
    },
    '/v1/openapi.json': {
      get: { operationId: 'openapi', responses: { '200': { description: 'this document' } } },
    },
  };
}

/** POST /v1/images: a build from a tar of its context (serve --allow-builds). */
function imageBuildOperation(): Record<string, unknown> {
  return {
    operationId: 'buildImage',
    description:
      "build an image from a tar of its context (only with serve --allow-builds: a build step runs as root with the engine's default capabilities, memory --build-memory-mib, stopped past --build-timeout-sec); cached by the content hash of the context and the Dockerfile path (the server's own record of the build, not a label); never pulls",
    parameters: [
      {
        name: 'tag',
        in: 'query',
        required: false,
        description: 'NAME[:TAG] (":latest" added); default roboguide-build:<hash>; roboguide/* is reserved',
        schema: { type: 'string' },
      },
      {
        name: 'dockerfile',
        in: 'query',
        required: false,
        description: "the Dockerfile's path inside the context (default Dockerfile)",
        schema: { type: 'string' },
      },
      {
        name: 'network',
        in: 'query',
        required: false,
        description: 'the network of RUN steps: "none" (default) or "bridge" (the guarded network)',
        schema: { type: 'string', enum: ['none', 'bridge'] },
      },
    ],
    requestBody: {
      required: true,
      content: { 'application/x-tar': { schema: { type: 'string', format: 'binary' } } },
    },
    responses: {
      '200': {
        description: 'NDJSON: build output lines, then the image (or an error)',
        content: { 'application/x-ndjson': { schema: ref('ImageBuildEvent') } },
      },
      '400': error(
        'invalid parameters, not a tar, no Dockerfile at that path or more than one, a parser directive (# escape/syntax/check), ADD of a URL or git remote, LABEL roboguide.*, a reserved tag (roboguide/, also behind docker.io/), or a FROM image the engine does not have (E_IMAGE_MISSING, naming it: no pulls)',
      ),
      '403': error('builds are off: serve was started without --allow-builds (E_BUILDS_DISABLED)'),
      '409': error('the tag names an existing image that was not built through this endpoint (E_TAG_TAKEN)'),
      '413': error('the context is larger than --max-build-context-mib'),
      '429': error('too many builds running (--max-builds); Retry-After'),
    },
  };
}

/** POST /v1/images/pull: a pull with credentials as ${NAME} references. */
function imagePullOperation(): Record<string, unknown> {
  return {
    operationId: 'pullImage',
    description:
      'pull an image from its registry (issue 43); credentials as ${NAME} references to variables the server allows (--allow-env), sent to the engine only in X-Registry-Auth, never written or logged',
    requestBody: {
      required: true,
      content: {
        'application/json': {
          schema: {
            type: 'object',
            required: ['image'],
            properties: {
              image: { type: 'string' },
              credentials: {
                type: 'object',
                properties: { username: { type: 'string' }, password: { type: 'string' } },
              },
            },
          },
        },
      },
    },
    responses: {
      '200': {
        description:
          'NDJSON: {"progress": {status, id, current, total}} lines, then {"image": {ref, id, bytes}} or {"error": {code: "E_IMAGE_PULL_FAILED", message}}',
        content: { 'application/x-ndjson': { schema: { type: 'object' } } },
      },
      '400': error('no image, literal credentials, or a ${NAME} the server does not allow or has not set'),
    },
  };
}

/** Pairs: start, status, stop, logs (the `pair run` lifecycle). */
export function pairPaths(): Record<string, unknown> {
  return {
    '/v1/pairs': {
      post: {
        operationId: 'startPair',
        requestBody: { required: true, content: { 'application/json': { schema: ref('PairSpec') } } },
        responses: {
          '202': json('PairAccepted', 'claimed and started'),
          '400': error('invalid spec'),
          '409': error('host capacity reached'),
          '503': error('engine unavailable'),
        },
      },
    },
    '/v1/pairs/{id}': {
      get: {
        operationId: 'pairStatus',
        parameters: [pathId],
        responses: { '200': json('PairStatus', 'state, receipt and result'), '404': error('unknown pair') },
      },
      delete: {
        operationId: 'stopPair',
        parameters: [pathId],
        responses: { '200': json('PairStatus', 'after the controlled stop'), '404': error('unknown pair') },
      },
    },
    '/v1/pairs/{id}/logs': {
      get: {
        operationId: 'pairLogs',
        parameters: [
          pathId,
          {
            name: 'stream',
            in: 'query',
            required: false,
            schema: { type: 'string', enum: ['stdout', 'stderr'] },
          },
          { name: 'follow', in: 'query', required: false, schema: { type: 'string', enum: ['1'] } },
        ],
        responses: {
          '200': {
            description: 'the redacted log',
            content: { 'text/plain': { schema: { type: 'string' } } },
          },
          '404': error('unknown pair'),
        },
      },
    },
  };
}
