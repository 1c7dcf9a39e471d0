/**
 * Host paths of a job checked before anything is written (`e1-batch start`, `pair run`): the outcome path
 * holds no symlink (lstat of every component), and what the pair gets mounted — its cwd and its outcome's
 * folder — reaches none of the protected paths (core/mount-policy.ts), compared by real path.
 */
import { BATCH_FILE, JOURNAL_FILE, RECEIPT_FILE, STDOUT_LOG } from '../core/evidence-names.js';
import { dirname, join } from 'node:path';
import type { Issue } from '../core/errors.js';
import {
  checkMounts,
  isWithin,
  normalizeAbsolute,
  resolveProtectedPaths,
  type MountRequest,
  type ProtectedPaths,
} from '../core/mount-policy.js';
import { canCheckMany, errnoOf, type FileSystem } from './ports/file-system.js';

export interface JobPaths {
  /** Issue path prefix: `jobs[3]` in a manifest, `` (root) for a pair spec. */
  readonly prefix: string;
  readonly cwd: string;
  readonly outcome_path: string;
}

function field(prefix: string, name: string): string {
  return prefix === '' ? name : `${prefix}.${name}`;
}

/**
 * Whether anything is at `path` (SPEC §3 start checks), by lstat: a symlink is there, dangling or not, and is never
 * followed to decide (access or stat would call a dangling link absent). Any failure to look counts as absent, as
 * before.
 */
export async function somethingAt(fs: FileSystem, path: string): Promise<boolean> {
  try {
    await fs.lstat(path);
    return true;
  } catch {
    return false;
  }
}

/** Outcome paths that already hold something (the operator copy would replace it): one issue per job, at its field. */
export async function staleOutcomeIssues(
  fs: FileSystem,
  jobs: readonly Pick<JobPaths, 'prefix' | 'outcome_path'>[],
): Promise<Issue[]> {
  const issues: Issue[] = [];
  for (const job of jobs) {
    if (await somethingAt(fs, job.outcome_path)) {
      issues.push({
        path: field(job.prefix, 'outcome_path'),
        rule: "already exists: it would be replaced by this run's outcome; move it away first",
      });
    }
  }
  return issues;
}

/** realpath of the longest existing prefix, with the missing rest appended (a path may not exist yet). */
export async function resolveReal(fs: FileSystem, path: string): Promise<string> {
  const normalized = normalizeAbsolute(path);
  try {
    return await fs.realpath(normalized);
  } catch (err) {
    const code = errnoOf(err);
    if ((code !== 'ENOENT' && code !== 'ENOTDIR') || normalized === '/') throw err;
    const parent = dirname(normalized);
    return join(await resolveReal(fs, parent), normalized.slice(parent === '/' ? 1 : parent.length + 1));
  }
}

/**
 * The first folder on `path` (itself included, from `/` down) that is the evidence of a run of ours — a batch's
 * output (`batch.json` and `events.jsonl`) or a pair's folder (`receipt.json` and `stdout.log`: a `pair run`
 * directory, a batch's `jobs/<id>/`) — or null. Another batch's evidence is not in this run's protected paths.
 */
async function evidenceAbove(fs: FileSystem, path: string): Promise<string | null> {
  const segments = normalizeAbsolute(path)
    .split('/')
    .filter((s) => s !== '');
  const folders = segments.map((_, i) => `/${segments.slice(0, i + 1).join('/')}`);
  const marks = folders.flatMap((f) => [
    join(f, BATCH_FILE),
    join(f, JOURNAL_FILE),
    join(f, RECEIPT_FILE),
    join(f, STDOUT_LOG),
  ]);
  const there = canCheckMany(fs)
    ? await fs.existMany(marks)
    : await Promise.all(marks.map((m) => somethingAt(fs, m)));
  for (const [i, folder] of folders.entries()) {
    if (
      (there[4 * i] === true && there[4 * i + 1] === true) ||
      (there[4 * i + 2] === true && there[4 * i + 3] === true)
    )
      return folder;
  }
  return null;
}

/** A symlink (or a non-folder where a folder must be) anywhere in `path`; null when every existing component is plain. */
async function symlinkProblem(fs: FileSystem, path: string): Promise<string | null> {
  const segments = normalizeAbsolute(path)
    .split('/')
    .filter((s) => s !== '');
  let current = '';
  for (const [i, segment] of segments.entries()) {
    current = `${current}/${segment}`;
    let kind: string;
    try {
      kind = (await fs.lstat(current)).kind;
    } catch (err) {
      if (errnoOf(err) === 'ENOENT') return null;
      return `cannot inspect ${current} (${errnoOf(err) ?? 'error'})`;
    }
    if (kind === 'symlink')
      return `holds a symbolic link at ${current}: refused (a link could redirect our writes)`;
    if (i < segments.length - 1 && kind !== 'directory') return `${current} is not a folder`;
  }
  return null;
}

/** The mount rules with every path resolved to its real path (a missing one through its longest existing prefix). */
export function resolveProtected(fs: FileSystem, p: ProtectedPaths): Promise<ProtectedPaths> {
  return resolveProtectedPaths(p, (path) => resolveReal(fs, path));
}

/** Every problem with the jobs' host paths, each at its field; empty when all are allowed. */
export async function jobPathIssues(
  fs: FileSystem,
  jobs: readonly JobPaths[],
  protectedPaths: ProtectedPaths,
): Promise<Issue[]> {
  const resolved = await resolveProtected(fs, protectedPaths);
  const issues: Issue[] = [];
  const mounted: { prefix: string; cwd: string; outcomeDir: string }[] = [];
  for (const job of jobs) {
    const outcomeField = field(job.prefix, 'outcome_path');
    const cwdField = field(job.prefix, 'cwd');
    // `a/link/..` is not `a` to the kernel (`..` of a link's target): refused rather than resolved by text.
    for (const [name, path] of [
      ['cwd', job.cwd],
      ['outcome_path', job.outcome_path],
    ] as const) {
      if (path.split('/').includes('..'))
        issues.push({
          path: field(job.prefix, name),
          rule: 'must not hold a ".." component (after a symbolic link it would lead elsewhere)',
        });
    }
    const link = await symlinkProblem(fs, job.outcome_path);
    if (link !== null) issues.push({ path: outcomeField, rule: link });
    const mounts: MountRequest[] = [];
    try {
      const cwd = await resolveReal(fs, job.cwd);
      const outcomeDir = await resolveReal(fs, dirname(job.outcome_path));
      mounts.push({ field: cwdField, hostPath: cwd }, { field: outcomeField, hostPath: outcomeDir });
      mounted.push({ prefix: job.prefix, cwd, outcomeDir });
      for (const [name, path] of [
        [cwdField, cwd],
        [outcomeField, outcomeDir],
      ] as const) {
        const evidence = await evidenceAbove(fs, path);
        if (evidence !== null)
          issues.push({
            path: name,
            rule: `must not lie inside the evidence of another run (${evidence}): a pair could rewrite it`,
          });
      }
      if (cwd === outcomeDir) {
        issues.push({
          path: outcomeField,
          rule: "must not lie directly in cwd: the outcome's folder is mounted privately for each pair, which would hide cwd; use a subfolder such as <cwd>/out/",
        });
      }
    } catch (err) {
      issues.push({ path: cwdField, rule: `cannot resolve the host path (${errnoOf(err) ?? 'error'})` });
    }
    for (const issue of checkMounts(mounts, resolved))
      issues.push({ path: issue.field, rule: issue.message });
  }
  return [...issues, ...crossJobIssues(mounted)];
}

/**
 * A job whose cwd shows another job's outcome folder could read that pair's outcome copy (written there once
 * its container is gone). Allowed when the folder is the job's own outcome folder or below it: its private
 * mount hides the host folder (the usual layout, one shared `out/`).
 *
 * A job whose cwd lies strictly inside another job's cwd or outcome folder is refused: the other pair could replace
 * it (or a folder above it) with a link before this one starts. Equal cwds are allowed (one shared read-write cwd,
 * the README's layout): a pair cannot replace the folder that is its own mount point.
 */
function crossJobIssues(jobs: readonly { prefix: string; cwd: string; outcomeDir: string }[]): Issue[] {
  const issues: Issue[] = [];
  for (const job of jobs) {
    const outer = jobs.find(
      (k) =>
        k !== job && ((job.cwd !== k.cwd && isWithin(job.cwd, k.cwd)) || isWithin(job.cwd, k.outcomeDir)),
    );
    if (outer !== undefined) {
      const what = isWithin(job.cwd, outer.outcomeDir)
        ? `the outcome folder ${outer.outcomeDir}`
        : `the cwd ${outer.cwd}`;
      issues.push({
        path: field(job.prefix, 'cwd'),
        rule: `lies inside ${what} of ${outer.prefix}: that pair could swap it for a link before this one starts; use sibling folders or one shared cwd`,
      });
    }
    const other = jobs.find(
      (k) => k !== job && isWithin(k.outcomeDir, job.cwd) && !isWithin(k.outcomeDir, job.outcomeDir),
    );
    if (other === undefined) continue;
    issues.push({
      path: field(job.prefix, 'cwd'),
      rule: `shows the outcome folder ${other.outcomeDir} of ${other.prefix}: this pair could read that pair's outcome; use one outcome folder for every job, or keep outcome folders outside other jobs' cwd`,
    });
  }
  return issues;
}
