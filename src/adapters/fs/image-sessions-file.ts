// What images hold in the sessions folder (src/core/sessions-skip.ts), kept between processes in the user's cache
// folder: a fresh `pair run`, or a batch whose supervisor is new, skips the engine's archive call (a chrooted tar
// in the container, about 120 ms) for an image it has already seen, as one long-lived supervisor always did.
// Image ids are content hashes, so what the file says stays true; it holds only image ids, folder paths and
// "absent"/"empty", never anything a pair wrote. A cache: unreadable, malformed or unwritable, it is simply not
// used (each copy is then made, as before). `docs/spec.md` §6.7 says when the copy is skipped.
import {
  closeSync,
  constants,
  fstatSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { randomBytes } from 'node:crypto';
import { openOwnFolderSync } from './private-dir.js';
import {
  ImageSessionsMemo,
  type ImageSessionsContent,
  type ImageSessionsFact,
} from '../../core/sessions-skip.js';

const SCHEMA = 'roboguide.image-sessions/v1';
const IMAGE_ID = /^sha256:[0-9a-f]{64}$/;
/** Nothing larger is read (1,000 entries of 4 KiB paths at most). */
const MAX_FILE_BYTES = 8 * 1024 * 1024;

/** An ImageSessionsMemo read from `file` on first use and written back (atomically) when it learns something new. */
export class FileImageSessionsMemo extends ImageSessionsMemo {
  /** The file's folder, held (private-dir.ts openOwnFolderSync): null, a memo of this process only. */
  readonly #folder: number | null;
  readonly #name: string;
  #loaded = false;

  /**
   * `file` null, or in a folder that is not ours alone or not reached from `/` through folders only root and we can
   * change (what it says skips copies of evidence: root under a `sudo` that kept HOME must not take another user's
   * word): a memo of this process only.
   */
  constructor(file: string | null, capacity?: number) {
    super(capacity);
    const cut = file?.lastIndexOf('/') ?? -1;
    this.#folder = file === null || cut === -1 ? null : openOwnFolderSync(file.slice(0, cut) || '/');
    this.#name = file === null ? '' : file.slice(cut + 1);
  }

  /** `name` in the held folder. */
  #at(name: string): string {
    return `/proc/self/fd/${this.#folder}/${name}`;
  }

  override get(imageId: string, dir: string): ImageSessionsContent | undefined {
    this.#load();
    return super.get(imageId, dir);
  }

  override learn(imageId: string, dir: string, content: ImageSessionsContent): boolean {
    this.#load();
    const news = super.learn(imageId, dir, content);
    if (news) this.#save();
    return news;
  }

  #load(): void {
    if (this.#loaded) return;
    this.#loaded = true;
    for (const fact of this.#read()) super.learn(fact.imageId, fact.dir, fact.content);
  }

  /**
   * The facts in the file, the malformed ones left out; none when there is no file or it is not ours: a plain file of
   * this user that no one else can write, never through a link (what it says skips copies of evidence).
   */
  #read(): ImageSessionsFact[] {
    if (this.#folder === null) return [];
    let handle: number;
    try {
      handle = openSync(
        this.#at(this.#name),
        constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK,
      );
    } catch {
      return [];
    }
    try {
      const info = fstatSync(handle);
      const ours = info.uid === (process.geteuid?.() ?? info.uid);
      if (!info.isFile() || !ours || (info.mode & 0o022) !== 0 || info.size > MAX_FILE_BYTES) return [];
      const parsed: unknown = JSON.parse(readFileSync(handle, 'utf8'));
      if (typeof parsed !== 'object' || parsed === null) return [];
      const { schema, images } = parsed as { schema?: unknown; images?: unknown };
      if (schema !== SCHEMA || !Array.isArray(images)) return [];
      return images.filter(isFact);
    } catch {
      return [];
    } finally {
      closeSync(handle);
    }
  }

  /**
   * The file rewritten whole (a temporary file renamed over it), with what another process wrote since it was read
   * kept, ours newer. Two processes writing at once: one's news may be lost, which costs that image one more copy.
   */
  #save(): void {
    if (this.#folder === null) return;
    const merged = new ImageSessionsMemo();
    for (const fact of [...this.#read(), ...this.entries()])
      merged.learn(fact.imageId, fact.dir, fact.content);
    const temp = this.#at(`${this.#name}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
    try {
      writeFileSync(temp, `${JSON.stringify({ schema: SCHEMA, images: merged.entries() })}\n`, {
        mode: 0o600,
        flag: 'wx',
      });
      renameSync(temp, this.#at(this.#name));
    } catch {
      rmSync(temp, { force: true });
    }
  }
}

function isFact(value: unknown): value is ImageSessionsFact {
  if (typeof value !== 'object' || value === null) return false;
  const { imageId, dir, content } = value as Record<string, unknown>;
  return (
    typeof imageId === 'string' &&
    IMAGE_ID.test(imageId) &&
    typeof dir === 'string' &&
    dir.startsWith('/') &&
    dir.length <= 4096 &&
    !dir.includes('\0') &&
    (content === 'absent' || content === 'empty')
  );
}

/**
 * `$XDG_CACHE_HOME/roboguide-eval/image-sessions.json` ($XDG_CACHE_HOME when absolute, else `~/.cache`); null when
 * there is no such home. The memo makes and checks its folders (FileImageSessionsMemo).
 */
export function imageSessionsCacheFile(env: Readonly<Record<string, string | undefined>>): string | null {
  const xdg = env['XDG_CACHE_HOME'] ?? '';
  const home = env['HOME'] ?? '';
  const base = xdg.startsWith('/') ? xdg : home.startsWith('/') ? `${home}/.cache` : null;
  return base === null ? null : `${base}/roboguide-eval/image-sessions.json`;
}
