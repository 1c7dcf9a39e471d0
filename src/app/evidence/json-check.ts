import type { z } from 'zod';
import { isObject, type JsonObject } from '../../core/json-object.js';

/**
 * What `readJson` parses a file through: a zod schema, or a type guard. A file that parses as JSON but fails the
 * check is E_STORE (syscall `parse`) naming the file and the rule, exactly like a torn or non-JSON file: never a
 * value of the wrong shape handed on.
 */
export type JsonCheck<T> = z.ZodType<T> | ((value: unknown) => value is T);

/** The failed rule, or null when `value` passes. */
export function failedRule<T>(check: JsonCheck<T>, value: unknown): { data: T } | { rule: string } {
  if (typeof check === 'function')
    return check(value) ? { data: value } : { rule: 'not the expected record' };
  const parsed = check.safeParse(value);
  if (parsed.success) return { data: parsed.data };
  const issue = parsed.error.issues[0];
  const at = issue === undefined || issue.path.length === 0 ? '' : `${issue.path.map(String).join('.')}: `;
  return { rule: `${at}${issue?.message ?? 'invalid'}` };
}

/** Any JSON object (the least every evidence file is). */
export const jsonObject = (value: unknown): value is JsonObject => isObject(value);
