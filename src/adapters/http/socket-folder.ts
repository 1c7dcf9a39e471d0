import { dirname, resolve } from 'node:path';
import { ExitCode, RoboguideError } from '../../core/errors.js';
import { openOwnFolder } from '../fs/private-dir.js';
import { UnsafePathError } from '../no-follow-dir.js';

/**
 * The serve socket's folder (docs/serve.md "The socket"): made 0700 where missing, reached from `/` without
 * following a link, ours and writable by no other user — not even a sticky one like /tmp, where another user could
 * bind the name first, nor a folder of theirs, where they could remove our socket and bind their own. Nobody else
 * can then rename, remove or add anything in it, so the socket bound by its path and chmod-ed 0600 by its path is
 * the one we bound. Returns the absolute socket path; E_SOCKET_UNSAFE (exit 2) names the folder and the rule.
 */
export async function claimSocketFolder(socketPath: string): Promise<string> {
  const path = resolve(socketPath);
  try {
    await (await openOwnFolder(dirname(path))).close();
    return path;
  } catch (err) {
    if (!(err instanceof UnsafePathError)) throw err;
    throw new RoboguideError('E_SOCKET_UNSAFE', `--socket: ${err.message}`, {
      exitCode: ExitCode.invalidInput,
      context: { path: err.path, socket: path },
      suggestions: [
        'leave --socket out: the default $XDG_RUNTIME_DIR/roboguide-eval/api.sock is in a folder of yours',
        'or name a folder of yours no other user can write to: --socket /run/roboguide-eval/api.sock (root), ~/.roboguide/api.sock',
      ],
    });
  }
}

/**
 * serve's data directory (evidence, session files): made 0700 where missing and held to the rules of the socket's
 * folder, so no other user can swap it or anything above it for a link. E_OUTPUT_UNSAFE (exit 2) names the rule.
 */
export async function claimDataDir(dataDir: string): Promise<string> {
  const path = resolve(dataDir);
  try {
    await (await openOwnFolder(path)).close();
    return path;
  } catch (err) {
    if (!(err instanceof UnsafePathError)) throw err;
    throw new RoboguideError('E_OUTPUT_UNSAFE', `--data-dir: ${err.message}`, {
      exitCode: ExitCode.invalidInput,
      context: { path: err.path, dataDir: path },
      suggestions: ['leave --data-dir out, or name a folder of yours that no other user can write to'],
    });
  }
}
