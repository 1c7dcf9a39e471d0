import type { ComponentName } from './openapi-components.js';

/** The paths of `serve`'s OpenAPI document, by resource: the service itself, sessions, pairs. */

const ref = (name: ComponentName): { $ref: string } => ({ $ref: `#/components/schemas/${name}` });
const json = (name: ComponentName, description: string) => ({
  description,
  content: { 'application/json': { schema: ref(name) } },
});
const error = (description: string) => json('Error', description);
const sessionId = { name: 'id', in: 'path', required: true, schema: { type: 'string' } } as const;
const containerPath = (description: string) => ({
  name: 'path',
  in: 'query',
  required: true,
  description: `${description}; absolute, or relative to the session's working directory (its workdir, else the image's WorkingDir, else /)`,
  schema: { type: 'string', minLength: 1 },
});
const asUser = {
  name: 'user',
  in: 'query',
  required: false,
  description:
    "the user the transfer runs as inside the container (name or uid, optionally :group); default: the container's user. Its permissions apply; what it writes belongs to it; a name the container does not know: 400 E_USER_UNKNOWN",
  schema: { type: 'string' },
};
const fileErrors = {
  '403': error('E_PERMISSION_DENIED: the user may not read or write there'),
  '404': error('unknown session; E_FILE_NOT_FOUND: no such file or directory'),
  '409': error(
    'E_IS_A_DIRECTORY: a directory where a file is read or written (never replaced); E_NOT_A_DIRECTORY: a part of the path is a file; E_TOOL_MISSING: the image lacks tar or cat; session being deleted',
  ),
  '429': error(
    'too many archive transfers running (--max-archives-per-session, --max-archives); Retry-After',
  ),
};
const tar = { 'application/x-tar': { schema: { type: 'string', contentMediaType: 'application/x-tar' } } };
const bytes = {
  'application/octet-stream': { schema: { type: 'string', contentMediaType: 'application/octet-stream' } },
};

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
      post: {
        operationId: 'buildImage',
        description:
          "build an image from a tar of its context (only with serve --allow-builds: a build step runs as root with the engine's default capabilities, memory --build-memory-mib, stopped past --build-timeout-sec); cached by the content hash of the context and the Dockerfile path (the server's own record of the build, not a label); never pulls",
        parameters: [
          {
            name: 'tag',
            in: 'query',
            required: false,
            description:
              'NAME[:TAG] (":latest" added); default roboguide-build:<hash>; roboguide/* is reserved',
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
          '409': error(
            'the tag names an existing image that was not built through this endpoint (E_TAG_TAKEN)',
          ),
          '413': error('the context is larger than --max-build-context-mib'),
          '429': error('too many builds running (--max-builds); Retry-After'),
        },
      },
    },
    '/v1/images/pull': {
      post: {
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
          '400': error(
            'no image, literal credentials, or a ${NAME} the server does not allow or has not set',
          ),
        },
      },
    },
    '/v1/openapi.json': {
      get: { operationId: 'openapi', responses: { '200': { description: 'this document' } } },
    },
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
          '400': error(
            'invalid request, unset ${NAME} or one not allowed (serve --allow-env), a secret_env value too short to mask, refused mount, missing image',
          ),
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
          '200': json(
            'SessionDetail',
            'the session, with its working directory, user, network, address and published ports',
          ),
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
          '503': error(
            'the container is removed (verified) but the registry cannot be reached to release its slot: DELETE again after Retry-After',
          ),
        },
      },
    },
    '/v1/sessions/{id}/exec': {
      post: {
        operationId: 'exec',
        parameters: [
          sessionId,
          { name: 'stream', in: 'query', required: false, schema: { type: 'string', enum: ['1'] } },
        ],
        requestBody: {
          required: true,
          content: {
            'application/json': { schema: ref('Exec') },
            'application/vnd.roboguide.exec-stream': {
              schema: { type: 'string', contentMediaType: 'application/octet-stream' },
              description:
                'streamed stdin: one line of JSON (an Exec without stdin/stdin_base64), a newline, then the raw stdin bytes to the end of the body (no size cap; piped into the command as it arrives)',
            },
          },
        },
        responses: {
          '200': {
            description: 'the result (redacted); with ?stream=1 an NDJSON stream of ExecEvent',
            content: {
              'application/json': { schema: ref('ExecResult') },
              'application/x-ndjson': { schema: ref('ExecEvent') },
            },
          },
          '400': error(
            'invalid request, or env references a variable that is unset or not allowed (serve --allow-env)',
          ),
          '404': error('unknown session'),
          '409': error('session being deleted'),
          '429': error(
            'too many execs running in the session or in all (--max-execs-per-session, --max-execs); Retry-After',
          ),
        },
      },
    },
    '/v1/sessions/{id}/archive': {
      put: {
        operationId: 'putArchive',
        parameters: [sessionId, containerPath('directory in the container (created when missing)'), asUser],
        requestBody: { required: true, content: tar },
        responses: {
          '200': json(
            'ArchiveUpload',
            'extracted by the user: modes (permission bits) kept, links created as links',
          ),
          '400': error(
            'refused by the safe-extraction rules (e.g. a link to an absolute path or out of the destination); invalid path or user',
          ),
          ...fileErrors,
        },
      },
      get: {
        operationId: 'getArchive',
        parameters: [sessionId, containerPath('file or directory in the container'), asUser],
        responses: {
          '200': {
            description: 'a tar made by the user, each file redacted, modes and symbolic links kept',
            content: tar,
          },
          ...fileErrors,
          '413': error('E_ARCHIVE_TOO_LARGE: past the download limits'),
        },
      },
    },
    '/v1/sessions/{id}/file': {
      get: {
        operationId: 'readFile',
        parameters: [sessionId, containerPath('a file in the container'), asUser],
        responses: {
          '200': { description: "the file's bytes, read by the user and redacted", content: bytes },
          ...fileErrors,
          '413': error('E_FILE_TOO_LARGE: use GET …/archive'),
        },
      },
      put: {
        operationId: 'writeFile',
        parameters: [
          sessionId,
          containerPath('a file in the container (its folders are created)'),
          asUser,
          {
            name: 'mode',
            in: 'query',
            required: false,
            description: 'octal permission bits applied after writing, e.g. 0755',
            schema: { type: 'string', pattern: '^0?[0-7]{3}$' },
          },
        ],
        requestBody: { required: true, content: bytes },
        responses: {
          '200': json('FileUpload', 'written by the user (streamed, no size cap)'),
          '400': error('invalid path, user or mode'),
          ...fileErrors,
        },
      },
    },
    '/v1/sessions/{id}/egress': {
      put: {
        operationId: 'setSessionEgress',
        description:
          'changes a live session\'s egress policy (docs/spec.md 5.6): every connection made after the 200 obeys the new one; tunnels through the proxy opened under the old one are closed, and a change of network (none, open, allowlist) takes the container off its network before it joins the new one. A switch that fails leaves mode "none" (503 E_EGRESS_SWITCH_FAILED)',
        parameters: [sessionId],
        requestBody: { required: true, content: { 'application/json': { schema: ref('EgressPolicy') } } },
        responses: {
          '200': json('EgressPolicy', 'the policy now in force'),
          '400': error('invalid policy (the field and the rule named)'),
          '404': error('unknown session'),
          '409': error(
            'allowlist on a server without the egress proxy (E_EGRESS_UNAVAILABLE); session being deleted',
          ),
          '503': error('the proxy or the engine failed: the session is left with mode "none"'),
        },
      },
    },
    '/v1/sessions/{id}/keepalive': {
      post: {
        operationId: 'keepalive',
        parameters: [sessionId],
        responses: { '200': json('Keepalive', 'TTL renewed'), '404': error('unknown session') },
      },
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
        parameters: [sessionId],
        responses: { '200': json('PairStatus', 'state, receipt and result'), '404': error('unknown pair') },
      },
      delete: {
        operationId: 'stopPair',
        parameters: [sessionId],
        responses: { '200': json('PairStatus', 'after the controlled stop'), '404': error('unknown pair') },
      },
    },
    '/v1/pairs/{id}/logs': {
      get: {
        operationId: 'pairLogs',
        parameters: [
          sessionId,
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
