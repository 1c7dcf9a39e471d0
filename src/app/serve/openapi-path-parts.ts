import type { ComponentName } from './openapi-components.js';

/** The pieces every path of `serve`'s OpenAPI document is written with: a component reference, a JSON answer. */

export const ref = (name: ComponentName): { $ref: string } => ({ $ref: `#/components/schemas/${name}` });
export const json = (name: ComponentName, description: string) => ({
  description,
  content: { 'application/json': { schema: ref(name) } },
});
export const error = (description: string) => json('Error', description);
/** The `{id}` of a session or a pair. */
export const pathId = { name: 'id', in: 'path', required: true, schema: { type: 'string' } } as const;
