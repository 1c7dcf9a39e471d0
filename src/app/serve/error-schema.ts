import { z } from 'zod';

/** The error body of the `serve` API (`{"error":{"code","message","issues"}}`), alone or as a stream's last line. */

export const ApiErrorBody = z.strictObject({
  code: z.string(),
  message: z.string(),
  issues: z.array(z.strictObject({ path: z.string(), rule: z.string() })),
});

export const ErrorSchema = z.strictObject({ error: ApiErrorBody }).meta({ title: 'Error' });
