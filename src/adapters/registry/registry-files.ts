import { lstatSync } from 'node:fs';
import { dirname } from 'node:path';

/**
 * Why the registry's files may not be trusted, or null: the database and its `-wal`/`-shm` must each be a regular
 * file (never a link) of ours that no one else can write, in a folder of ours or root's that others cannot write
 * (unless sticky). Another user who can write one could rewrite the host's ledger (the second review deleted the
 * record of live mounts through a registry another user had made, and a session then mounted a running pair's
 * evidence).
 */
export function registryFilesRefusal(path: string): string | null {
  const euid = process.geteuid?.() ?? 0;
  const folder = lstatSync(dirname(path));
  if (!folder.isDirectory()) return `${dirname(path)} is not a folder (a link?)`;
  if (folder.uid !== euid && folder.uid !== 0)
    return `${dirname(path)} is owned by user ${folder.uid}, not by you or root`;
  if ((folder.mode & 0o022) !== 0 && (folder.mode & 0o1000) === 0)
    return `${dirname(path)} is writable by other users and not sticky`;
  for (const file of [path, `${path}-wal`, `${path}-shm`]) {
    let info;
    try {
      info = lstatSync(file);
    } catch {
      continue;
    }
    if (!info.isFile()) return `${file} is not a regular file (a link?)`;
    if (info.uid !== euid) return `${file} is owned by user ${info.uid}, not by you`;
    if ((info.mode & 0o022) !== 0) return `${file} is writable by other users`;
  }
  return null;
}
