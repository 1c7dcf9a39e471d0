import { z } from 'zod';
import { ManifestSchema } from './schema.js';

/** JSON Schema (draft 2020-12) of the manifest as a user writes it (defaulted fields optional). */
export function manifestJsonSchema(): Record<string, unknown> {
  return z.toJSONSchema(ManifestSchema, { io: 'input' });
}
