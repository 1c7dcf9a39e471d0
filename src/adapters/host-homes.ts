import { readFile } from 'node:fs/promises';

/**
 * Every user's home folder from the password database (`/etc/passwd`, field 6): absolute paths other than `/`,
 * without duplicates. An unreadable database gives none (the mount rules keep `/root`, `/home` and `$HOME`).
 */
export async function passwdHomes(path = '/etc/passwd'): Promise<string[]> {
  const text = await readFile(path, 'utf8').catch(() => '');
  return parsePasswdHomes(text);
}

export function parsePasswdHomes(text: string): string[] {
  const homes = new Set<string>();
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const home = line.split(':')[5];
    if (home !== undefined && home.startsWith('/') && home !== '/') homes.add(home);
  }
  return [...homes];
}
