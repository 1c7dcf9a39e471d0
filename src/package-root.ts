import { existsSync } from 'node:fs';
import { dirname, join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { InternalError } from './core/errors.js';

/**
 * Root of the installed package (the folder holding package.json, docker/, dist/): the nearest folder above this
 * module with a package.json. Found, not computed, because this module runs from `dist/package-root.js` (tsc) and
 * from a chunk under `dist/bundle/` (the bundled commands) at different depths.
 */
export const PACKAGE_ROOT = packageRootAbove(dirname(fileURLToPath(import.meta.url)));
export const DOCKER_DIR = join(PACKAGE_ROOT, 'docker');
/** Whether this code runs from the build (dist/), not from the sources (the tests): its code version is the build's. */
export const RUNS_FROM_BUILD = fileURLToPath(import.meta.url).startsWith(join(PACKAGE_ROOT, 'dist') + sep);

function packageRootAbove(start: string): string {
  for (let dir = start; ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    if (dirname(dir) === dir) throw new InternalError(`no package.json above ${start}`);
  }
}

/** The launcher: what a child process of ours runs. */
export const BIN_RUN_JS = join(PACKAGE_ROOT, 'bin', 'run.js');
