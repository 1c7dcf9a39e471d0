import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** `<package version>+<git commit>` when the package is a git checkout, else the package version. */
export async function readCodeVersion(packageRoot: string): Promise<string> {
  let version = '0.0.0';
  try {
    version =
      (JSON.parse(await readFile(join(packageRoot, 'package.json'), 'utf8')) as { version?: string })
        .version ?? version;
  } catch {
    // an unreadable package.json leaves the placeholder version
  }
  try {
    const [{ stdout }, { stdout: dirty }] = await Promise.all([
      run('git', ['-C', packageRoot, 'rev-parse', 'HEAD'], { timeout: 5_000 }),
      run('git', ['-C', packageRoot, 'status', '--porcelain', '--untracked-files=no'], { timeout: 5_000 }),
    ]);
    return `${version}+${stdout.trim()}${dirty.trim() === '' ? '' : '.dirty'}`;
  } catch {
    return version;
  }
}
