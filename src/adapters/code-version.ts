import { execFile } from 'node:child_process';
import { readFile, realpath } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Where `npm run build` records the checkout it built (scripts/build-info.js), under the package root. */
export const BUILD_INFO_FILE = join('dist', 'build-info.json');

/** The git commit a build came from and whether tracked files differed from it; `commit` null: not a checkout. */
export interface CheckoutState {
  readonly commit: string | null;
  readonly dirty: boolean;
}

/**
 * `<package version>+<git commit>[.dirty]` when the package is a git checkout, else the package version.
 *
 * The commit is the one `npm run build` recorded in dist/build-info.json: the commit of the code that runs, even
 * when the checkout has moved on since, and no `git` process per command (two spawns, about 35 ms of a `pair
 * run`, and `git status` refreshing the user's index under their feet). Without that file (the sources run
 * directly, as the tests do) git is asked here.
 */
export async function readCodeVersion(packageRoot: string): Promise<string> {
  const version = await packageVersion(packageRoot);
  const checkout = (await builtCheckout(packageRoot)) ?? (await checkoutState(packageRoot));
  if (checkout.commit === null) return version;
  return `${version}+${checkout.commit}${checkout.dirty ? '.dirty' : ''}`;
}

/**
 * The commit and dirtiness of the checkout whose top is `packageRoot`. An installed package inside another
 * project's checkout (node_modules/…) is not a checkout of its own: its commit would be that project's.
 */
export async function checkoutState(packageRoot: string): Promise<CheckoutState> {
  const none: CheckoutState = { commit: null, dirty: false };
  try {
    const [{ stdout: revs }, { stdout: changed }] = await Promise.all([
      run('git', ['-C', packageRoot, 'rev-parse', '--show-toplevel', 'HEAD'], { timeout: 5_000 }),
      run('git', ['-C', packageRoot, 'status', '--porcelain', '--untracked-files=no'], { timeout: 5_000 }),
    ]);
    const [top, commit] = revs.trim().split('\n');
    if (top === undefined || commit === undefined || !/^[0-9a-f]{40,64}$/.test(commit)) return none;
    if ((await realpath(top)) !== (await realpath(packageRoot))) return none;
    return { commit, dirty: changed.trim() !== '' };
  } catch {
    return none;
  }
}

/** dist/build-info.json as the build wrote it; null when absent or not of that shape (git is asked instead). */
async function builtCheckout(packageRoot: string): Promise<CheckoutState | null> {
  try {
    const parsed = JSON.parse(
      await readFile(join(packageRoot, BUILD_INFO_FILE), 'utf8'),
    ) as Partial<CheckoutState>;
    const commitOk =
      parsed.commit === null ||
      (typeof parsed.commit === 'string' && /^[0-9a-f]{40,64}$/.test(parsed.commit));
    if (!commitOk || typeof parsed.dirty !== 'boolean') return null;
    return { commit: parsed.commit ?? null, dirty: parsed.dirty };
  } catch {
    return null;
  }
}

async function packageVersion(packageRoot: string): Promise<string> {
  try {
    const pjson = JSON.parse(await readFile(join(packageRoot, 'package.json'), 'utf8')) as {
      version?: string;
    };
    return pjson.version ?? '0.0.0';
  } catch {
    // an unreadable package.json leaves the placeholder version
    return '0.0.0';
  }
}
