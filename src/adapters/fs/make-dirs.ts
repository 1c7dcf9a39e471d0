import { mkdirSync, statSync } from 'node:fs';
import { mkdir, stat } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';

/**
 * `mkdir -p`: the folder `path` and any missing folder above it, each made once (with `mode`), going down from the
 * deepest one that exists. Node's own `mkdir(path, { recursive: true })` never returns where the system answers
 * ENOENT for a folder whose parent exists (anything under `/proc`: a HOME or XDG_STATE_HOME of `/proc` made
 * `capacity` hang): here each folder is tried at most twice, so that answer is an error, thrown.
 *
 * As Node's: a folder that exists (a link to one included) is fine; a file where a folder should be is EEXIST or
 * ENOTDIR, thrown.
 */
export function makeDirsSync(path: string, mode?: number): void {
  const missing = missingLevelsSync(resolve(path), mode);
  for (const dir of missing) {
    try {
      mkdirSync(dir, { mode });
    } catch (err) {
      if (!existsAsFolderSync(err, dir)) throw err;
    }
  }
}

/** `makeDirsSync`, asynchronous. */
export async function makeDirs(path: string, mode?: number): Promise<void> {
  const missing: string[] = [];
  for (let dir = resolve(path); ; dir = dirname(dir)) {
    try {
      await mkdir(dir, { mode });
      break;
    } catch (err) {
      if (errorCode(err) === 'EEXIST' && (await isFolder(dir))) break;
      if (errorCode(err) !== 'ENOENT' || dirname(dir) === dir) throw err;
      missing.push(dir);
    }
  }
  for (const dir of missing.reverse()) {
    try {
      await mkdir(dir, { mode });
    } catch (err) {
      if (!(errorCode(err) === 'EEXIST' && (await isFolder(dir)))) throw err;
    }
  }
}

/** Going up from `target`: made at once, or there already; else the folders still to make, top first. */
function missingLevelsSync(target: string, mode: number | undefined): string[] {
  const missing: string[] = [];
  for (let dir = target; ; dir = dirname(dir)) {
    try {
      mkdirSync(dir, { mode });
      break;
    } catch (err) {
      if (existsAsFolderSync(err, dir)) break;
      if (errorCode(err) !== 'ENOENT' || dirname(dir) === dir) throw err;
      missing.push(dir);
    }
  }
  return missing.reverse();
}

function existsAsFolderSync(err: unknown, dir: string): boolean {
  if (errorCode(err) !== 'EEXIST') return false;
  try {
    return statSync(dir).isDirectory();
  } catch {
    return false;
  }
}

async function isFolder(dir: string): Promise<boolean> {
  return stat(dir).then(
    (s) => s.isDirectory(),
    () => false,
  );
}

function errorCode(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | null)?.code;
}
