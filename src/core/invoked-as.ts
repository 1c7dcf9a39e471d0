/**
 * The command the user typed to run this tool, as hints name it (`bin/roboguide-eval e1-batch status …`): never
 * `npx roboguide-eval`, which outside this checkout asks the npm registry for a package that is not published. Pure.
 *
 * `launcher`: what the checkout's launcher (bin/roboguide-eval) was run as (its `$0`, handed over in
 * ROBOGUIDE_EVAL_BIN); `script`: process.argv[1] (an installed binary's link, or bin/run.js). A command found on
 * PATH is named by its base name; the launcher's path exactly as typed (issue 40: an absolute path typed came back
 * relative); `script` (which Node makes absolute, whatever was typed) relative to the working directory when under it.
 */
export function invokedAs(input: {
  readonly launcher: string | undefined;
  readonly script: string | undefined;
  readonly pathDirs: readonly string[];
  readonly cwd: string;
}): string {
  const raw = input.launcher !== undefined && input.launcher !== '' ? input.launcher : input.script;
  if (raw === undefined || raw === '') return 'roboguide-eval';
  const slash = raw.lastIndexOf('/');
  if (slash < 0) return raw;
  const dir = raw.slice(0, slash) || '/';
  const base = raw.slice(slash + 1);
  if (input.pathDirs.some((d) => trimSlash(d) === trimSlash(dir))) return base;
  if (raw === input.launcher) return raw;
  if (raw.startsWith(`${trimSlash(input.cwd)}/`)) return raw.slice(trimSlash(input.cwd).length + 1);
  return raw;
}

function trimSlash(path: string): string {
  return path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path;
}
