import { createHash } from 'node:crypto';
import { lstat, rename, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SECCOMP_PROFILE, SECCOMP_SECURITY_OPT } from '../../core/seccomp-profile.js';
import { engineProductOf, type VersionBody } from './engine-probe.js';
import { makeDirs } from '../fs/make-dirs.js';

/**
 * The `SecurityOpt` entry that gives a container our seccomp profile on this engine. Docker takes the profile's JSON
 * itself (`seccomp=<json>`, what its CLI sends). Podman's Docker API (4.3) takes a path there (`seccomp=<json>` fails
 * every create: "opening seccomp profile failed: open {…}: file name too long"), read by the Podman service on its
 * host: the profile is written to a file of ours on this host (a local Podman, rootful or of this user) and the path
 * sent. Asked once per engine client; a failed answer is asked again next time.
 */
export class EngineSeccompOption {
  readonly #version: () => Promise<VersionBody>;
  readonly #dir: string;
  #option: Promise<string> | undefined;

  constructor(version: () => Promise<VersionBody>, dir: string = profileDir()) {
    this.#version = version;
    this.#dir = dir;
  }

  option(): Promise<string> {
    return (this.#option ??= this.#resolve().catch((err: unknown) => {
      this.#option = undefined;
      throw err;
    }));
  }

  async #resolve(): Promise<string> {
    if (engineProductOf(await this.#version()).product !== 'podman') return SECCOMP_SECURITY_OPT;
    return `seccomp=${await writeProfileFile(this.#dir)}`;
  }
}

/** Root's under /run (not world-writable), anyone else's under the temporary folder, named for the user. */
function profileDir(): string {
  const uid = process.getuid?.() ?? 0;
  return uid === 0 ? '/run/roboguide-eval' : join(tmpdir(), `roboguide-eval-${uid}`);
}

/**
 * Writes the profile as `seccomp-<sha256 prefix>.json` in `dir` (made 0700 if missing; refused when it is a link or
 * another user's: whoever could replace the file could lift the profile), temp file then rename.
 */
export async function writeProfileFile(dir: string): Promise<string> {
  await makeDirs(dir, 0o700);
  const st = await lstat(dir);
  const uid = process.getuid?.() ?? 0;
  if (!st.isDirectory() || st.uid !== uid || (st.mode & 0o022) !== 0)
    throw new Error(`seccomp profile folder ${dir}: must be a folder of user ${uid}, not writable by others`);
  const json = JSON.stringify(SECCOMP_PROFILE);
  const file = join(dir, `seccomp-${createHash('sha256').update(json).digest('hex').slice(0, 16)}.json`);
  const temp = `${file}.${process.pid}.tmp`;
  await writeFile(temp, json, { mode: 0o644 });
  await rename(temp, file);
  return file;
}
