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

/**
 * A record of one kind (`roboguide.e1.receipt/v1`…): a JSON object whose `schema`, when present, names that kind, and
 * whose fields named in `strings`, when present, are strings. Presence is the reader's to check: older writers (and
 * hand-made records) lack fields, as journal records may (core/journal-events.ts). A record of another kind, an array,
 * or a number where a name belongs is refused.
 */
export function taggedRecord<T extends { readonly schema: string }>(
  tag: T['schema'],
  strings: readonly (keyof T & string)[] = [],
): (value: unknown) => value is T {
  return (value: unknown): value is T =>
    isObject(value) &&
    (value['schema'] === undefined || value['schema'] === tag) &&
    strings.every((key) => value[key] === undefined || typeof value[key] === 'string');
}
