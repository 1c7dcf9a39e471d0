/**
 * JSON paths of validation issues: `$` for the root, `jobs[2].ports[0]`,
 * `jobs[0].environment.OPENAI_API_KEY`, `source_sha256["/abs/driver.py"]`.
 */
export type PathSegment = string | number;

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

export const ROOT_PATH = '$';

/** Appends segments to a path (`$` or `''` means the root). */
export function joinPath(base: string, ...segments: readonly PathSegment[]): string {
  let out = base === ROOT_PATH ? '' : base;
  for (const segment of segments) {
    if (typeof segment === 'number') out += `[${segment}]`;
    else if (IDENTIFIER.test(segment)) out += out === '' ? segment : `.${segment}`;
    else out += `[${JSON.stringify(segment)}]`;
  }
  return out === '' ? ROOT_PATH : out;
}

export function formatPath(segments: readonly PropertyKey[]): string {
  return joinPath(
    ROOT_PATH,
    ...segments.map((s) => (typeof s === 'number' || typeof s === 'string' ? s : String(s))),
  );
}
