/** A parsed JSON object of unknown shape (evidence, an outcome, a session line). */
export type JsonObject = Readonly<Record<string, unknown>>;

/** A plain JSON object: not null, not an array. */
export function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** An own property only: `constructor`, `__proto__`, `toString` never resolve through the prototype. */
export function own(obj: JsonObject, key: string): unknown {
  return Object.hasOwn(obj, key) ? obj[key] : undefined;
}
