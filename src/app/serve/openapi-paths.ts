import type { ComponentName } from './openapi-components.js';

/** The paths of `serve`'s OpenAPI document, by resource: the service itself, sessions, pairs. */

const ref = (name: ComponentName): { $ref: string } => ({ $ref: `#/components/schemas/${name}` });
const json = (name: ComponentName, description: string) => ({ description, content: { 'application/json': { schema: ref(name) } } });
const error = (description: string) => json('Error', description);
const sessionId = { name: 'id', in: 'path', required: true, schema: { type: 'string' } } as const;
const absPath = (description: string) => ({ name: 'path', in: 'query', required: true, description, schema: { type: 'string', pattern: '^/' } });

/** Health, image presence and this document. */
export function servicePaths(): Record<string, unknown> {
  return {
    '/v1/health': { get: { operationId: 'health', responses: { '200': json('Health', 'server and engine state') } } },
    '/v1/images': {
      get: {
        operationId: 'imageExists',
        parameters: [{ name: 'ref', in: 'query', required: true, schema: { type: 'string' } }],
        responses: { '200': json('ImagePresence', 'whether the engine has the image (no pulls)') },
      },
      post: {
        operationId: 'buildImage',
        description: 'build an image from a tar of its context; cached by the content hash of the context and the Dockerfile path (label roboguide.build.sha256); never pulls',
        parameters: [
          { name: 'tag', in: 'query', required: false, description: 'NAME[:TAG] (":latest" added); default roboguide-build:<hash>; roboguide/* is reserved', schema: { type: 'string' } },
          { name: 'dockerfile', in: 'query', required: false, description: 'the Dockerfile\'s path inside the context (default Dockerfile)', schema: { type: 'string' } },
          { name: 'network', in: 'query', required: false, description: 'the network of RUN steps: "none" (default) or "bridge" (the guarded network)', schema: { type: 'string', enum: ['none', 'bridge'] } },
        ],
        requestBody: { required: true, content: { 'application/x-tar': { schema: { type: 'string', format: 'binary' } } } },
        responses: {
          '200': { description: 'NDJSON: build output lines, then the image (or an error)', content: { 'application/x-ndjson': { schema: ref('ImageBuildEvent') } } },
          '400': error('invalid parameters, not a tar, no Dockerfile at that path, or a FROM image the engine does not have (E_IMAGE_MISSING, naming it: no pulls)'),
          '409': error('the tag names an existing image that was not built through this endpoint (E_TAG_TAKEN)'),
          '413': error('the context is larger than --max-build-context-mib'),
          '429': error('too many builds running (--max-builds); Retry-After'),
        },
      },
    },
    '/v1/openapi.json': { get: { operationId: 'openapi', responses: { '200': { description: 'this document' } } } },
  };
}

/** Sessions: create, list, delete, exec, archives, keepalive. */
export function sessionPaths(): Record<string, unknown> {
  return {
    '/v1/sessions': {
      get: { operationId: 'listSessions', responses: { '200': json('SessionList', 'live sessions') } },
      post: {
        operationId: 'createSession',
        requestBody: { required: true, content: { 'application/json': { schema: ref('SessionCreate') } } },
        responses: {
          '201': json('SessionCreated', 'created and started'),
          '400': error('invalid request, unset ${NAME} or one not allowed (serve --allow-env), a secret_env value too short to mask, refused mount, missing image'),
          '409': error('port taken or host capacity reached'),
          '503': error('engine or registry unavailable (registry: with Retry-After)'),
        },
      },
    },
    '/v1/sessions/{id}': {
      get: {
        operationId: 'getSession',
        parameters: [sessionId],
        responses: {
          '200': json('SessionDetail', 'the session, with its working directory, user, network, address and published ports'),
          '404': error('unknown session'),
          '409': error('session being deleted'),
        },
      },
      delete: {
        operationId: 'deleteSession',
        parameters: [sessionId],
        responses: {
          '200': json('CleanupRecord', 'the cleanup record (the same on every call)'),
          '404': error('unknown session'),
          '503': error('the container is removed (verified) but the registry cannot be reached to release its slot: DELETE again after Retry-After'),
        },
      },
    },
    '/v1/sessions/{id}/exec': {
      post: {
        operationId: 'exec',
        parameters: [sessionId, { name: 'stream', in: 'query', required: false, schema: { type: 'string', enum: ['1'] } }],
        requestBody: { required: true, content: { 'application/json': { schema: ref('Exec') } } },
        responses: {
          '200': {
            description: 'the result (redacted); with ?stream=1 an NDJSON stream of ExecEvent',
            content: { 'application/json': { schema: ref('ExecResult') }, 'application/x-ndjson': { schema: ref('ExecEvent') } },
          },
          '400': error('invalid request, or env references a variable that is unset or not allowed (serve --allow-env)'),
          '404': error('unknown session'),
          '409': error('session being deleted'),
          '429': error('too many execs running in the session or in all (--max-execs-per-session, --max-execs); Retry-After'),
        },
      },
    },
    '/v1/sessions/{id}/archive': {
      put: {
        operationId: 'putArchive',
        parameters: [sessionId, absPath('directory in the container (created when missing)')],
        requestBody: { required: true, content: { 'application/x-tar': { schema: { type: 'string', contentMediaType: 'application/x-tar' } } } },
        responses: {
          '200': json('ArchiveUpload', 'extracted'),
          '400': error('refused by the safe-extraction rules'),
          '404': error('unknown session'),
          '429': error('too many archive transfers running (--max-archives-per-session, --max-archives); Retry-After'),
        },
      },
      get: {
        operationId: 'getArchive',
        parameters: [sessionId, absPath('file or directory in the container')],
        responses: {
          '200': { description: 'a tar stream, each file redacted', content: { 'application/x-tar': { schema: { type: 'string', contentMediaType: 'application/x-tar' } } } },
          '404': error('unknown session or path'),
          '429': error('too many archive transfers running (--max-archives-per-session, --max-archives); Retry-After'),
        },
      },
    },
    '/v1/sessions/{id}/keepalive': {
      post: { operationId: 'keepalive', parameters: [sessionId], responses: { '200': json('Keepalive', 'TTL renewed'), '404': error('unknown session') } },
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
        responses: { '202': json('PairAccepted', 'claimed and started'), '400': error('invalid spec'), '409': error('host capacity reached'), '503': error('engine unavailable') },
      },
    },
    '/v1/pairs/{id}': {
      get: { operationId: 'pairStatus', parameters: [sessionId], responses: { '200': json('PairStatus', 'state, receipt and result'), '404': error('unknown pair') } },
      delete: { operationId: 'stopPair', parameters: [sessionId], responses: { '200': json('PairStatus', 'after the controlled stop'), '404': error('unknown pair') } },
    },
    '/v1/pairs/{id}/logs': {
      get: {
        operationId: 'pairLogs',
        parameters: [
          sessionId,
          { name: 'stream', in: 'query', required: false, schema: { type: 'string', enum: ['stdout', 'stderr'] } },
          { name: 'follow', in: 'query', required: false, schema: { type: 'string', enum: ['1'] } },
        ],
        responses: { '200': { description: 'the redacted log', content: { 'text/plain': { schema: { type: 'string' } } } }, '404': error('unknown pair') },
      },
    },
  };
}
