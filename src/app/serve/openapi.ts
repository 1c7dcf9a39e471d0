import { COMPONENTS, schemaOf, type ComponentName } from './openapi-components.js';
import { pairPaths, servicePaths, sessionPaths } from './openapi-paths.js';

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
    paths: { ...servicePaths(), ...sessionPaths(), ...pairPaths() },
    security: [{}, { bearer: [] }],
  };
}
