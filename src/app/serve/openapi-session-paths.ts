import { error, json, pathId, ref } from './openapi-path-parts.js';

/** The session paths of `serve`'s OpenAPI document: create, list, delete, exec, archives and files, egress, keepalive. */

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
  '422': error(
    'E_FILE_UNUSABLE: the kernel refuses this read or write at that path (an I/O error, a device, a busy binary, a loop of links: /proc/self/mem, /dev/full, /dev/tty)',
  ),
  '507': error(
    "E_CONTAINER_FULL: no room in the container's file system (its layer, a tmpfs, a quota, /dev/full)",
  ),
  '429': error(
    'too many archive transfers running (--max-archives-per-session, --max-archives); Retry-After',
  ),
};
const tar = { 'application/x-tar': { schema: { type: 'string', contentMediaType: 'application/x-tar' } } };
const bytes = {
  'application/octet-stream': { schema: { type: 'string', contentMediaType: 'application/octet-stream' } },
};

/** Sessions: create, list, delete, exec, archives, keepalive. */
export function sessionPaths(): Record<string, unknown> {
  return {
    ...sessionResourcePaths(),
    '/v1/sessions/{id}/exec': { post: execOperation() },
    ...transferPaths(),
    '/v1/sessions/{id}/egress': { put: egressOperation() },
    '/v1/sessions/{id}/keepalive': {
      post: {
        operationId: 'keepalive',
        parameters: [pathId],
        responses: { '200': json('Keepalive', 'TTL renewed'), '404': error('unknown session') },
      },
    },
  };
}

/** The sessions themselves: list and create, read and delete one. */
function sessionResourcePaths(): Record<string, unknown> {
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
        parameters: [pathId],
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
        parameters: [pathId],
        responses: {
          '200': json('CleanupRecord', 'the cleanup record (the same on every call)'),
          '404': error('unknown session'),
          '503': error(
            'the container is removed (verified) but the registry cannot be reached to release its slot: DELETE again after Retry-After',
          ),
        },
      },
    },
  };
}

/** POST /v1/sessions/{id}/exec: a command, its stdin whole or streamed, its result or an NDJSON stream. */
function execOperation(): Record<string, unknown> {
  return {
    operationId: 'exec',
    parameters: [
      pathId,
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
  };
}

/** Archives and single files into and out of the container, as a user of its own. */
function transferPaths(): Record<string, unknown> {
  return {
    '/v1/sessions/{id}/archive': {
      put: {
        operationId: 'putArchive',
        parameters: [pathId, containerPath('directory in the container (created when missing)'), asUser],
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
        parameters: [pathId, containerPath('file or directory in the container'), asUser],
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
        parameters: [pathId, containerPath('a file in the container'), asUser],
        responses: {
          '200': { description: "the file's bytes, read by the user and redacted", content: bytes },
          ...fileErrors,
          '413': error('E_FILE_TOO_LARGE: use GET …/archive'),
        },
      },
      put: {
        operationId: 'writeFile',
        parameters: [
          pathId,
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
  };
}

/** PUT /v1/sessions/{id}/egress: a live session's egress policy changed. */
function egressOperation(): Record<string, unknown> {
  return {
    operationId: 'setSessionEgress',
    description:
      'changes a live session\'s egress policy (docs/spec.md 5.6): every connection made after the 200 obeys the new one; tunnels through the proxy opened under the old one are closed, and a change of network (none, open, allowlist) takes the container off its network before it joins the new one. A switch that fails leaves mode "none" (503 E_EGRESS_SWITCH_FAILED)',
    parameters: [pathId],
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
  };
}
