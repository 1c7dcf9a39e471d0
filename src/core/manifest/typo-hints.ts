import type { z } from 'zod';
import type { Issue } from '../errors.js';
import { formatPath, joinPath, ROOT_PATH } from './issue-path.js';

/**
 * "Did you mean" for unknown keys, and no follow-on errors from one typo. Pure.
 *
 * An unknown key within a small edit distance of a key the object allows is taken as a misspelling of it: the
 * issue names the likely key, and what only follows from that key's absence (`jobs is required`, each job's
 * `image is required` when the misspelled key is the top-level `image`) is not reported on top of it.
 */

/** Edit distance (optimal string alignment): insert, delete, substitute, or swap two adjacent letters, 1 each. */
export function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  const at = (i: number, j: number): number => d[i]?.[j] ?? 0;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        best = Math.min(best, at(i - 2, j - 2) + 1);
      d[i]![j] = best;
    }
  }
  return at(a.length, b.length);
}

/** The allowed key closest to `key`, when close enough to be a typo (at most 2 edits, and under half its length), or its abbreviation. */
export function closestKey(key: string, allowed: readonly string[]): string | null {
  let best: { key: string; distance: number } | null = null;
  for (const candidate of allowed) {
    const distance = editDistance(key.toLowerCase(), candidate.toLowerCase());
    if (distance > 2 || distance * 2 >= Math.max(candidate.length, 1)) continue;
    if (best === null || distance < best.distance) best = { key: candidate, distance };
  }
  if (best !== null) return best.key;
  const abbreviated = allowed.filter((candidate) => abbreviates(key, candidate));
  return abbreviated.length === 1 ? (abbreviated[0] ?? null) : null;
}

/**
 * `timeout_secs` for `timeout_seconds`, `mem_mib` for `memory_mib`: as many `_` words, each the same as the allowed
 * key's word or a shortening of it (its first letter, then some of its letters in order), at least one word whole.
 */
function abbreviates(key: string, candidate: string): boolean {
  const words = key.toLowerCase().split('_');
  const full = candidate.toLowerCase().split('_');
  if (words.length !== full.length || key.toLowerCase() === candidate.toLowerCase()) return false;
  if (!words.some((w, i) => w === full[i])) return false;
  return words.every((w, i) => {
    const f = full[i] ?? '';
    if (w === f) return true;
    if (w.length < 2 || w.length >= f.length || w[0] !== f[0]) return false;
    let at = 0;
    for (const ch of f) if (ch === w[at]) at++;
    return at === w.length;
  });
}

/** Object keys (own or through an array of objects) of the object at `path` whose schema allows `key`: where it belongs. */
export function homesOf(schema: AnySchema, path: readonly PropertyKey[], key: string): string[] {
  const homes: string[] = [];
  for (const child of allowedKeysAt(schema, path) ?? []) {
    for (const inner of [[child], [child, 0]] as PropertyKey[][]) {
      if (allowedKeysAt(schema, [...path, ...inner])?.includes(key)) {
        homes.push(inner.length === 1 ? child : `${child}[]`);
        break;
      }
    }
  }
  return homes;
}

type AnySchema = z.core.$ZodType;

/** The keys the object schema at `path` allows (through arrays, optional and default wrappers); null: not an object. */
export function allowedKeysAt(schema: AnySchema, path: readonly PropertyKey[]): string[] | null {
  let current: AnySchema | undefined = unwrap(schema);
  for (const segment of path) {
    if (current === undefined) return null;
    const def = current._zod.def as { type: string; shape?: Record<string, AnySchema>; element?: AnySchema };
    if (def.type === 'object' && typeof segment === 'string') current = def.shape?.[segment];
    else if (def.type === 'array' && typeof segment === 'number') current = def.element;
    else return null;
    current = current === undefined ? undefined : unwrap(current);
  }
  if (current === undefined) return null;
  const def = current._zod.def as { type: string; shape?: Record<string, AnySchema> };
  return def.type === 'object' && def.shape !== undefined ? Object.keys(def.shape) : null;
}

function unwrap(schema: AnySchema): AnySchema {
  let s = schema;
  for (let i = 0; i < 8; i++) {
    const def = s._zod.def as { type: string; innerType?: AnySchema; in?: AnySchema };
    if (
      (def.type === 'optional' ||
        def.type === 'default' ||
        def.type === 'nullable' ||
        def.type === 'prefault') &&
      def.innerType
    )
      s = def.innerType;
    else if (def.type === 'pipe' && def.in) s = def.in;
    else break;
  }
  return s;
}

/** A misspelled key: where the object is, the key as written, the key it likely meant (absent from the object). */
export interface Typo {
  readonly objectPath: string;
  readonly written: string;
  readonly meant: string;
}

/** The unknown-key issue, with its suggestion when there is one (a likely key here, or the objects it belongs in). */
export function unknownKeyRule(key: string, meant: string | null, homes: readonly string[] = []): string {
  if (meant !== null) return `unknown key ${JSON.stringify(key)} (did you mean ${JSON.stringify(meant)}?)`;
  if (homes.length > 0) {
    const where = homes
      .map((h) => (h.endsWith('[]') ? `each of "${h.slice(0, -2)}"` : `"${h}"`))
      .join(' or ');
    return `unknown key ${JSON.stringify(key)} here (it belongs under ${where})`;
  }
  return `unknown key ${JSON.stringify(key)}`;
}

/** Typos among the unknown keys of one zod issue, and their rules. */
export function typosOf(
  schema: AnySchema,
  path: readonly PropertyKey[],
  keys: readonly string[],
  value: unknown,
): { rules: string[]; typos: Typo[] } {
  const allowed = allowedKeysAt(schema, path) ?? [];
  const present = objectAt(value, path);
  const rules: string[] = [];
  const typos: Typo[] = [];
  for (const key of keys) {
    const meant = closestKey(key, allowed);
    rules.push(unknownKeyRule(key, meant, meant === null ? homesOf(schema, path, key) : []));
    // Only a key the object lacks can have been meant: its absence is what the follow-on errors are about.
    if (meant !== null && present !== null && !Object.hasOwn(present, meant))
      typos.push({ objectPath: formatPath(path), written: key, meant });
  }
  return { rules, typos };
}

function objectAt(value: unknown, path: readonly PropertyKey[]): Readonly<Record<string, unknown>> | null {
  let current: unknown = value;
  for (const segment of path) {
    if (typeof current !== 'object' || current === null) return null;
    current = (current as Record<PropertyKey, unknown>)[segment];
  }
  return typeof current === 'object' && current !== null && !Array.isArray(current)
    ? (current as Record<string, unknown>)
    : null;
}

/**
 * Drops what follows only from a misspelled key being absent: `is required` at the key it meant and, for a
 * misspelled top-level `image`, each job's missing image. Other issues stay.
 */
export function withoutFollowOns(issues: readonly Issue[], typos: readonly Typo[]): Issue[] {
  if (typos.length === 0) return [...issues];
  const missing = new Set(typos.map((t) => joinPath(t.objectPath, t.meant)));
  const rootImage = typos.some((t) => t.objectPath === ROOT_PATH && t.meant === 'image');
  return issues.filter((issue) => {
    if (missing.has(issue.path) && issue.rule.startsWith('is required')) return false;
    if (rootImage && /^jobs\[\d+\]\.image$/.test(issue.path) && issue.rule.startsWith('is required'))
      return false;
    return true;
  });
}
