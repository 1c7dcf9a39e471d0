import { COMPONENTS, schemaOf, type ComponentName } from './openapi-components.js';
import { pairPaths, servicePaths } from './openapi-paths.js';
import { sessionPaths } from './openapi-session-paths.js';

/**
 * The OpenAPI 3.1 document of `serve`, generated from the same zod schemas that validate the requests
 * (`z.toJSONSchema`). docs/openapi.json is this document; a unit test keeps them equal.
 */
export function openApiDocument(version: string): Record<string, unknown> {
  const schemas = Object.fromEntries(
    (Object.keys(COMPONENTS) as ComponentName[]).map((name) => [name, schemaOf(name)]),
  );
  return {
    openapi: '3.1.0',
    info: {
      title: 'roboguide-eval serve',
      version,
      description:
        'Local API for backend adapters (Harbor, SForge): sessions with exec and archives, and pairs with the `pair run` lifecycle. ' +
        'Served on a unix socket (mode 0600); over TCP only with a bearer token. Errors are {"error":{"code","message","issues"}}.',
    },
    servers: [{ url: 'http://localhost', description: 'unix socket (curl --unix-socket PATH)' }],
    components: {
      schemas,
      securitySchemes: {
        bearer: { type: 'http', scheme: 'bearer', description: 'required on --listen only' },
      },
    },
    paths: withCommonErrors({ ...servicePaths(), ...sessionPaths(), ...pairPaths() }),
    security: [{}, { bearer: [] }],
  };
}

const errorRef = (description: string) => ({
  description,
  content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
});

/**
 * The answers every route of a kind can give (issue 39), added where the route does not already describe them:
 * a JSON body's limits (408, 413, 415: Connection: close), a session whose container ended (410), the server
 * shutting down (503), a bad percent-encoding in the path (400), the server's own disk full (507).
 */
function withCommonErrors(paths: Record<string, unknown>): Record<string, unknown> {
  const common: Record<string, ReturnType<typeof errorRef>> = {
    '400': errorRef('invalid request (a path segment that is not valid percent-encoded UTF-8, …)'),
    '507': errorRef(
      "E_NO_SPACE: the server's own disk is full (its data folder: spooled uploads and downloads, evidence)",
    ),
  };
  const jsonBody: Record<string, ReturnType<typeof errorRef>> = {
    '408': errorRef('E_BODY_TIMEOUT: the body stopped arriving (Connection: close)'),
    '413': errorRef('E_TOO_LARGE: the JSON body is over 4 MiB (answered at once; Connection: close)'),
    '415': errorRef('E_UNSUPPORTED_MEDIA_TYPE: a body that is not application/json'),
  };
  const session: Record<string, ReturnType<typeof errorRef>> = {
    '410': errorRef('E_SESSION_ENDED: its container exited or was removed; its slot is released'),
    '503': errorRef(
      'E_SERVER_STOPPING: the server is shutting down; or the engine or registry is unreachable',
    ),
  };
  for (const [path, operations] of Object.entries(paths) as [string, object][]) {
    for (const operation of Object.values(operations) as { requestBody?: unknown; responses: object }[]) {
      const json =
        JSON.stringify(operation.requestBody ?? null).includes('application/json') &&
        !JSON.stringify(operation.requestBody ?? null).includes('x-tar');
      const extra = {
        ...common,
        ...(json ? jsonBody : {}),
        ...(path.startsWith('/v1/sessions/{id}') ? session : {}),
      };
      operation.responses = { ...extra, ...operation.responses };
    }
  }
  return paths;
}
