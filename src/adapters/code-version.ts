import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
/** Bounded, and in English whatever the user's locale: "not a git repository" is read from git's stderr. */
const gitOptions = () => ({ timeout: 5_000, env: { ...process.env, LC_ALL: 'C' } });

/** Where `npm run build` records the checkout it built (scripts/build-info.js), under the package root. */
export const BUILD_INFO_FILE = join('dist', 'build-info.json');

/** The git commit of a package's checkout and whether tracked files differed from it; `commit` null: not a checkout. */
export interface CheckoutState {
  readonly commit: string | null;
  readonly dirty: boolean;
}

/** What dist/build-info.json holds: the package version and the checkout as they were when dist/ was built. */
export interface BuildInfo extends CheckoutState {
  readonly version: string;
}

const NOT_A_CHECKOUT: CheckoutState = { commit: null, dirty: false };
const COMMIT = /^[0-9a-f]{40,64}$/;

/**
 * `<package version>+<git commit>[.dirty]` when the package is a git checkout, else the package version.
 *
 * Code running from dist/ (`fromBuild`) reports what `npm run build` recorded in dist/build-info.json: the version,
 * commit and dirtiness of the code that runs, even when the checkout has moved on since, and no `git` process per
 * command (two spawns, about 35 ms of a `pair run`, and `git status` refreshing the user's index under their feet).
 * The sources run directly (the tests), or a build without that record: git is asked here.
 */
export async function readCodeVersion(
  packageRoot: string,
  options: { readonly fromBuild: boolean },
): Promise<string> {
  const built = options.fromBuild ? await readBuildInfo(packageRoot) : null;
  if (built !== null) return codeVersionOf(built.version, built);
  const checkout = await checkoutState(packageRoot).catch(() => NOT_A_CHECKOUT);
  return codeVersionOf(await packageVersion(packageRoot), checkout);
}

function codeVersionOf(version: string, checkout: CheckoutState): string {
  if (checkout.commit === null) return version;
  return `${version}+${checkout.commit}${checkout.dirty ? '.dirty' : ''}`;
}

/**
 * The checkout `packageRoot` belongs to, when its package.json is tracked there (a package installed inside another
 * project's checkout is not: its commit would be that project's). Not a checkout: commit null. Rejects when git cannot
 * tell (git missing, refusing the repository, too slow): a caller that records the answer must not record that.
 */
export async function checkoutState(packageRoot: string): Promise<CheckoutState> {
  try {
    await run('git', ['-C', packageRoot, 'ls-files', '--error-unmatch', 'package.json'], gitOptions());
  } catch (err) {
    const stderr = (err as { stderr?: unknown }).stderr;
    if (typeof stderr === 'string' && /not a git repository|did not match any file/i.test(stderr))
      return NOT_A_CHECKOUT;
    throw err;
  }
  const [{ stdout: head }, { stdout: changed }] = await Promise.all([
    run('git', ['-C', packageRoot, 'rev-parse', 'HEAD'], gitOptions()),
    run('git', ['-C', packageRoot, 'status', '--porcelain', '--untracked-files=no'], gitOptions()),
  ]);
  const commit = head.trim();
  if (!COMMIT.test(commit)) throw new Error(`git rev-parse HEAD printed ${JSON.stringify(commit)}`);
  return { commit, dirty: changed.trim() !== '' };
}

/** dist/build-info.json as the build wrote it; null when absent or not of that shape (git is asked instead). */
async function readBuildInfo(packageRoot: string): Promise<BuildInfo | null> {
  try {
    const parsed = JSON.parse(
      await readFile(join(packageRoot, BUILD_INFO_FILE), 'utf8'),
    ) as Partial<BuildInfo>;
    const commitOk =
      parsed.commit === null || (typeof parsed.commit === 'string' && COMMIT.test(parsed.commit));
    if (!commitOk || typeof parsed.dirty !== 'boolean' || typeof parsed.version !== 'string') return null;
    return { version: parsed.version, commit: parsed.commit ?? null, dirty: parsed.dirty };
  } catch {
    return null;
  }
}

/** package.json's version; 0.0.0 when it cannot be read. */
export async function packageVersion(packageRoot: string): Promise<string> {
  try {
    const pjson = JSON.parse(await readFile(join(packageRoot, 'package.json'), 'utf8')) as {
      version?: string;
    };
    return pjson.version ?? '0.0.0';
  } catch {
    return '0.0.0';
  }
}
