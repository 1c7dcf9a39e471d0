import { readFile, stat } from 'node:fs/promises';
import { InvalidInputError } from '../core/errors.js';

/** `--token-file` (serve, metrics): a file not readable by group or others, holding a token of 16 characters or more. */
export async function readTokenFile(tokenFile: string): Promise<string> {
  let token: string;
  try {
    const info = await stat(tokenFile);
    if ((info.mode & 0o077) !== 0)
      throw new InvalidInputError('E_USAGE', 'invalid flags', [
        { path: '--token-file', rule: 'must not be readable by group or others (chmod 600)' },
      ]);
    token = (await readFile(tokenFile, 'utf8')).trim();
  } catch (err) {
    if (err instanceof InvalidInputError) throw err;
    throw new InvalidInputError('E_USAGE', 'invalid flags', [
      { path: '--token-file', rule: `cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})` },
    ]);
  }
  if (token.length < 16)
    throw new InvalidInputError('E_USAGE', 'invalid flags', [
      { path: '--token-file', rule: 'must hold a token of at least 16 characters' },
    ]);
  return token;
}
