import type { Issue } from '../errors.js';
import { ENV_NAME_PATTERN, RESERVED_ENV_PREFIX } from './constants.js';
import { joinPath } from './issue-path.js';
import { isSecretLookingName, isUrlWithPassword, MIN_SECRET_VALUE_LENGTH } from './secrets.js';

/**
 * A job's `environment` (SPEC §3): public configuration, plus whole-string references
 * `${NAME}` to the supervisor's environment. Rule messages never contain a value.
 */
const REFERENCE = /^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$/;

/** The variable a value references, when the whole value is `${NAME}`. */
export function referencedName(value: string): string | undefined {
  return REFERENCE.exec(value)?.[1];
}

/** One problem with one entry, keyed by the variable name. */
export interface EnvironmentProblem {
  readonly name: string;
  readonly rule: string;
}

/**
 * `literalSecrets`: the serve API's rule (issue 23): a caller may send a secret's literal value (it is masked and
 * never written to disk); files (manifests, pair specs) never may.
 */
export function environmentProblems(
  env: Readonly<Record<string, string>>,
  options: { readonly literalSecrets?: boolean } = {},
): EnvironmentProblem[] {
  const problems: EnvironmentProblem[] = [];
  for (const [name, value] of Object.entries(env)) {
    const rule =
      nameRule(name) ??
      controlRule(value) ??
      (options.literalSecrets === true ? referenceRule(value) : valueRule(name, value));
    if (rule !== undefined) problems.push({ name, rule });
  }
  return problems;
}

function nameRule(name: string): string | undefined {
  if (!ENV_NAME_PATTERN.test(name))
    return 'must be a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)';
  if (name.startsWith(RESERVED_ENV_PREFIX)) return `names starting with ${RESERVED_ENV_PREFIX} are reserved`;
  return undefined;
}

/**
 * NUL cannot be carried by an environment variable at all (the engine fails and quotes the value in Go's escaped
 * form, which no masker of the literal recognises); the other C0 controls (but tab, CR, LF) and DEL are refused with it.
 */
// eslint-disable-next-line no-control-regex
const CONTROL_CHARACTER = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/;

function controlRule(value: string): string | undefined {
  if (CONTROL_CHARACTER.test(value))
    return 'must not contain a control character (NUL, U+0001..U+001F other than tab, CR and LF, or DEL)';
  return undefined;
}

function referenceRule(value: string): string | undefined {
  if (referencedName(value) !== undefined) return undefined;
  if (value.includes('${')) return 'references must be the whole value, exactly "${NAME}"';
  return undefined;
}

function valueRule(name: string, value: string): string | undefined {
  const reference = referenceRule(value);
  if (reference !== undefined || referencedName(value) !== undefined) return reference;
  if (isSecretLookingName(name)) {
    return `a secret-looking name must not hold a literal value; reference the supervisor environment as "\${NAME}"${didYouMean(value)}`;
  }
  if (isUrlWithPassword(name, value)) {
    return 'a URL with a password (user:password@) must not be a literal value; reference the supervisor environment as "${NAME}"';
  }
  return undefined;
}

/** A shell-style reference (`$NAME`, `$(NAME)`, `%NAME%`) written where `${NAME}` was meant: the hint, else ''. */
function didYouMean(value: string): string {
  const name =
    /^(?:\$([A-Za-z_][A-Za-z0-9_]*)|\$\(([A-Za-z_][A-Za-z0-9_]*)\)|\$\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}|%([A-Za-z_][A-Za-z0-9_]*)%)$/.exec(
      value.trim(),
    );
  const found = name?.slice(1).find((n) => n !== undefined);
  return found === undefined ? '' : ` (did you mean "\${${found}}"?)`;
}

/** One issue of one job, before `groupedIssues` folds the same rule across jobs. */
export interface JobIssue extends Issue {
  readonly jobId: string;
  /** The path with the job's index replaced by `*` (`jobs[*].environment.KEY`): what is the same across jobs. */
  readonly shape: string;
}

/** How many job ids one grouped line names before "… and N more". */
const JOBS_NAMED = 5;

/**
 * One line per rule and field (issue 40: one unset `${NAME}` used by 17 jobs was 17 identical lines): a rule met by
 * one job keeps its path; by several, the path with `[*]` and the jobs counted and named (the first few).
 */
export function groupedIssues(issues: readonly JobIssue[]): Issue[] {
  const groups = new Map<string, JobIssue[]>();
  for (const issue of issues) {
    const key = `${issue.shape}\u0000${issue.rule}`;
    groups.set(key, [...(groups.get(key) ?? []), issue]);
  }
  return [...groups.values()].map((group) => {
    const first = group[0] as JobIssue;
    if (group.length === 1) return { path: first.path, rule: first.rule };
    const ids = group.map((g) => g.jobId);
    const named = ids.slice(0, JOBS_NAMED).join(', ');
    const more = ids.length > JOBS_NAMED ? `, … and ${ids.length - JOBS_NAMED} more` : '';
    return { path: first.shape, rule: `${first.rule} (${ids.length} jobs: ${named}${more})` };
  });
}

/**
 * `groupedIssues` over any issues: those at `jobs[i]…` are the job's (named by its id from `jobIds`, else by its
 * index), the rest stay as they are, in order.
 */
export function groupedByJob(issues: readonly Issue[], jobIds: readonly (string | undefined)[]): Issue[] {
  return groupedIssues(
    issues.map((issue) => {
      const index = /^jobs\[(\d+)\]/.exec(issue.path)?.[1];
      if (index === undefined) return { ...issue, jobId: '', shape: `\u0001${issue.path}` };
      return {
        ...issue,
        jobId: jobIds[Number(index)] ?? `jobs[${index}]`,
        shape: issue.path.replace(/^jobs\[\d+\]/, 'jobs[*]'),
      };
    }),
  ).map((issue) => (issue.path.startsWith('\u0001') ? { ...issue, path: issue.path.slice(1) } : issue));
}

/** Names referenced as `${NAME}`, in first-use order, without duplicates. */
export function environmentReferences(env: Readonly<Record<string, string>>): string[] {
  const names = new Set<string>();
  for (const value of Object.values(env)) {
    const name = referencedName(value);
    if (name !== undefined) names.add(name);
  }
  return [...names];
}

/**
 * The values `source` holds for every `${NAME}` referenced in `environments` (unset ones are left
 * out): what our own logs must mask before a job's environment is resolved.
 */
export function referencedValues(
  environments: readonly Readonly<Record<string, string>>[],
  source: Readonly<Record<string, string | undefined>>,
): string[] {
  const values = new Set<string>();
  for (const env of environments) {
    for (const name of environmentReferences(env)) {
      const value = Object.hasOwn(source, name) ? source[name] : undefined;
      if (value !== undefined && value !== '') values.add(value);
    }
  }
  return [...values];
}

export type EnvironmentResolution =
  | { ok: true; values: Record<string, string>; secrets: string[]; warnings: string[] }
  | { ok: false; issues: Issue[] };

export interface ResolveOptions {
  /** Accept values shorter than MIN_SECRET_VALUE_LENGTH (they are masked anyway; a warning says so). */
  readonly allowShortSecrets?: boolean;
}

/**
 * Replaces every `${NAME}` value with `source[NAME]`. Every resolved value is a secret (to be
 * redacted); a missing or empty variable, or one shorter than MIN_SECRET_VALUE_LENGTH (unless
 * allowed), is an issue at `<pathPrefix>.<key>` naming the variable, never its value.
 */
export function resolveEnvironment(
  env: Readonly<Record<string, string>>,
  source: Readonly<Record<string, string | undefined>>,
  pathPrefix: string,
  options: ResolveOptions = {},
): EnvironmentResolution {
  const values: Record<string, string> = {};
  const secrets = new Set<string>();
  const issues: Issue[] = [];
  const warnings: string[] = [];
  for (const [key, value] of Object.entries(env)) {
    const name = referencedName(value);
    if (name === undefined) {
      values[key] = value;
      continue;
    }
    const resolved = Object.hasOwn(source, name) ? source[name] : undefined;
    if (resolved === undefined || resolved === '') {
      issues.push({
        path: joinPath(pathPrefix, key),
        rule: `references \${${name}}, which is not set or empty`,
      });
      continue;
    }
    if ([...resolved].length < MIN_SECRET_VALUE_LENGTH) {
      const rule = `references \${${name}}, whose value is shorter than ${MIN_SECRET_VALUE_LENGTH} characters`;
      if (options.allowShortSecrets !== true) {
        issues.push({
          path: joinPath(pathPrefix, key),
          rule: `${rule}: too short to mask safely (use a longer value, or --allow-short-secrets)`,
        });
        continue;
      }
      warnings.push(`${joinPath(pathPrefix, key)} ${rule}: every occurrence of it is masked in all output`);
    }
    values[key] = resolved;
    secrets.add(resolved);
  }
  return issues.length > 0 ? { ok: false, issues } : { ok: true, values, secrets: [...secrets], warnings };
}

export interface ResolvedJobEnvironment {
  readonly values: Record<string, string>;
  readonly secrets: string[];
  /** Short values accepted with --allow-short-secrets (named, never shown). */
  readonly warnings: string[];
}

/** Every job's environment resolved, and its problems (one per job and field: `environmentMissing` groups them to print). */
export function environmentIssues(
  jobs: readonly { readonly job_id: string; readonly environment: Readonly<Record<string, string>> }[],
  source: Readonly<Record<string, string | undefined>>,
  only?: ReadonlySet<string>,
  options: ResolveOptions = {},
): { resolved: Map<string, ResolvedJobEnvironment>; issues: Issue[] } {
  const resolved = new Map<string, ResolvedJobEnvironment>();
  const issues: Issue[] = [];
  for (const [i, job] of jobs.entries()) {
    if (only && !only.has(job.job_id)) continue;
    const r = resolveEnvironment(job.environment, source, `jobs[${i}].environment`, options);
    if (r.ok) resolved.set(job.job_id, { values: r.values, secrets: r.secrets, warnings: r.warnings });
    else issues.push(...r.issues);
  }
  return { resolved, issues };
}
