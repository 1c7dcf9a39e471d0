import type { z } from 'zod';
import type { Issue } from '../errors.js';
import { formatPath } from './issue-path.js';
import { typosOf, unknownKeyRule, type Typo } from './typo-hints.js';

/**
 * Turns zod issues into `{path, rule}` in plain words. The error map sees the input, but no
 * rule ever includes it: a value may be a secret.
 */
const ARTICLE: Readonly<Record<string, string>> = {
  int: 'an integer',
  number: 'a number',
  string: 'a string',
  boolean: 'a boolean (true or false)',
  array: 'an array',
  object: 'an object',
  record: 'an object',
};

/** Per-parse error map for the generic cases; schema-level messages take precedence. */
export function plainRule(issue: z.core.$ZodRawIssue): string | undefined {
  switch (issue.code) {
    case 'invalid_type':
      if (issue.input === undefined) return 'is required';
      return `must be ${ARTICLE[issue.expected] ?? issue.expected}`;
    case 'too_small':
      return sizeRule('at least', issue.origin, issue.minimum, issue.inclusive);
    case 'too_big':
      return sizeRule('at most', issue.origin, issue.maximum, issue.inclusive);
    default:
      return undefined;
  }
}

function sizeRule(
  bound: string,
  origin: string,
  limit: number | bigint,
  inclusive: boolean | undefined,
): string {
  if (origin === 'array') return `must have ${bound} ${String(limit)} item(s)`;
  if (origin === 'string') return `must have ${bound} ${String(limit)} character(s)`;
  const op = bound === 'at least' ? (inclusive === false ? '>' : '≥') : inclusive === false ? '<' : '≤';
  return `must be ${op} ${String(limit)}`;
}

/**
 * The issues in plain words. With `typo` (the schema and the value parsed), an unknown key close to an allowed one
 * says "did you mean", and `typos` lists those misspellings (see typo-hints.ts).
 */
export function issuesFromZod(
  error: z.ZodError,
  typo?: { readonly schema: z.core.$ZodType; readonly value: unknown; readonly typos?: Typo[] },
): Issue[] {
  const issues: Issue[] = [];
  for (const issue of error.issues) {
    const path = formatPath(issue.path);
    if (issue.code === 'unrecognized_keys') {
      if (typo === undefined) {
        for (const key of issue.keys) issues.push({ path, rule: unknownKeyRule(key, null) });
        continue;
      }
      const { rules, typos } = typosOf(typo.schema, issue.path, issue.keys, typo.value);
      for (const rule of rules) issues.push({ path, rule });
      typo.typos?.push(...typos);
    } else {
      issues.push({ path, rule: issue.message });
    }
  }
  return issues;
}

export function dedupeIssues(issues: readonly Issue[]): Issue[] {
  const seen = new Set<string>();
  return issues.filter((issue) => {
    const key = `${issue.path}\u0000${issue.rule}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}
