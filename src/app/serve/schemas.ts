import { z } from 'zod';
import { ApiErrorBody } from './error-schema.js';

/**
 * Request and response bodies of the `serve` API (issue 12); the OpenAPI document is generated from these, never
 * written by hand. Sessions, execs, the container-level request fields and the error body have their own modules
 * (imported from there); this one holds the small resources: health, images, files and pairs.
 */

export const HealthSchema = z
  .strictObject({
    ok: z.boolean(),
    engine: z.strictObject({ reachable: z.boolean(), version: z.string().nullable() }),
    version: z.string(),
    event_loop: z.strictObject({
      max_delay_ms: z.number().meta({
        description:
          'the longest the server was held by one piece of work since it started listening (no request may hold it long)',
      }),
    }),
  })
  .meta({ title: 'Health' });

export const ImagePresenceSchema = z
  .strictObject({ ref: z.string(), present: z.boolean() })
  .meta({ title: 'ImagePresence' });

export const ImageBuildEventSchema = z
  .union([
    z.strictObject({ log: z.string() }),
    z.strictObject({
      image: z.strictObject({
        tag: z.string(),
        id: z.string(),
        cached: z.boolean().meta({
          description: 'true: the same context (and Dockerfile path) was built before; answered at once',
        }),
      }),
    }),
    z
      .strictObject({
        error: ApiErrorBody,
      })
      .meta({
        description: "the last line when the build failed (E_BUILD_FAILED: the builder's own message)",
      }),
  ])
  .meta({
    title: 'ImageBuildEvent',
    description: 'one line of the NDJSON stream of POST /v1/images: build output, then the image or an error',
  });

export const ArchiveUploadSchema = z
  .strictObject({ files: z.int(), bytes: z.int() })
  .meta({ title: 'ArchiveUpload' });

export const FileUploadSchema = z
  .strictObject({ path: z.string().meta({ description: 'the file written (absolute)' }), bytes: z.int() })
  .meta({ title: 'FileUpload' });

export const PairAcceptedSchema = z.strictObject({ pair_id: z.string() }).meta({ title: 'PairAccepted' });

export const PairStatusSchema = z
  .strictObject({
    pair_id: z.string(),
    state: z.enum(['running', 'finished', 'failed']),
    receipt: z.record(z.string(), z.unknown()).nullable(),
    result: z
      .record(z.string(), z.unknown())
      .nullable()
      .meta({ description: 'the result.json record; null until the pair has finished' }),
    error: z.string().nullable(),
  })
  .meta({ title: 'PairStatus' });
