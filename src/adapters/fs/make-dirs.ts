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
export async function makeDirs(path: string, mode?: number): Promise<void> {
  const missing: string[] = [];
  // Up from `path` until a folder is made or found there; each one that said ENOENT waits its turn, going down.
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

/** `makeDirs`, synchronous (the same steps). */
export function makeDirsSync(path: string, mode?: number): void {
  const missing: string[] = [];
  for (let dir = resolve(path); ; dir = dirname(dir)) {
    try {
      mkdirSync(dir, { mode });
      break;
    } catch (err) {
      if (errorCode(err) === 'EEXIST' && isFolderSync(dir)) break;
      if (errorCode(err) !== 'ENOENT' || dirname(dir) === dir) throw err;
      missing.push(dir);
    }
  }
  for (const dir of missing.reverse()) {
    try {
      mkdirSync(dir, { mode });
    } catch (err) {
      if (!(errorCode(err) === 'EEXIST' && isFolderSync(dir))) throw err;
    }
  }
}

async function isFolder(dir: string): Promise<boolean> {
  return stat(dir).then(
    (s) => s.isDirectory(),
    () => false,
  );
}

function isFolderSync(dir: string): boolean {
  try {
    return statSync(dir).isDirectory();
  } catch {
    return false;
  }
}

function errorCode(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | null)?.code;
}
