import { accessSync, constants } from 'node:fs';
import { join } from 'node:path';

/**
 * The system folders a root-run helper program (mount, umount, iptables, ip6tables, nsenter) is taken from: never
 * the caller's PATH, whose folders a mount may reach (`~/bin` is a home subfolder, a default mount root): a planted
 * `mount` there ran as root and chose what was bound (the issue 38 review).
 */
export const SYSTEM_TOOL_FOLDERS: readonly string[] = ['/usr/sbin', '/usr/bin', '/sbin', '/bin'];

/**
 * The absolute path of the system program `name`: the first of SYSTEM_TOOL_FOLDERS that holds it as an executable.
 * When none does, the path it would have in `/usr/bin`, so that running it fails with ENOENT and the caller's
 * "not installed" message names it. A name with a `/` is taken as given.
 */
export function systemTool(name: string, folders: readonly string[] = SYSTEM_TOOL_FOLDERS): string {
  if (name.includes('/')) return name;
  for (const folder of folders) {
    const path = join(folder, name);
    try {
      accessSync(path, constants.X_OK);
      return path;
    } catch {
      // not here
    }
  }
  return join('/usr/bin', name);
}
