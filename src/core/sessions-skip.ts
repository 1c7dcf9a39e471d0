/**
 * What a stopped container changed in its own writable layer (the engine's `GET /containers/{id}/changes`), the
 * image it runs, and where its mounts are. Writes through a mount (a volume, a bind) never show in the changes.
 */
export interface FilesystemChanges {
  /** The image's content-addressed id (`sha256:…`): the same id is the same read-only content. */
  readonly imageId: string;
  /** Absolute container paths the writable layer added, modified or deleted. */
  readonly changed: readonly string[];
  /** Absolute container paths where something is mounted. */
  readonly mounts: readonly string[];
}

/** An absolute path without `.`, `..`, repeated or trailing slashes (`..` above the root stays at the root). */
function normalized(path: string): string {
  const parts: string[] = [];
  for (const part of path.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') parts.pop();
    else parts.push(part);
  }
  return `/${parts.join('/')}`;
}

/** True when `a` is `b`, lies under it, or is one of its ancestors. */
export function pathsOverlap(a: string, b: string): boolean {
  const x = normalized(a);
  const y = normalized(b);
  if (x === y) return true;
  const under = (inner: string, outer: string): boolean => outer === '/' || inner.startsWith(`${outer}/`);
  return under(x, y) || under(y, x);
}

/**
 * The container cannot have written anything at `dir`: no change of its writable layer is at, under or above it
 * (above: a parent replaced by a link or deleted would change what `dir` names), and no mount is there either.
 * Then `dir` holds exactly what the image put there. Conservative: any doubt is false, and a `dir` with a `..` is
 * doubt (in the container `..` is taken after a link, which the lexical reading here cannot follow).
 */
export function untouchedByContainer(changes: FilesystemChanges, dir: string): boolean {
  if (!dir.startsWith('/') || dir.split('/').includes('..')) return false;
  return (
    !changes.changed.some((p) => pathsOverlap(p, dir)) && !changes.mounts.some((m) => pathsOverlap(m, dir))
  );
}

/** What copying `dir` out of a container of an image gave when the container had not touched it. */
export type ImageSessionsContent = 'absent' | 'empty';

/**
 * Per image id and directory: what the image itself holds there, learned from a real copy out of a container that
 * did not touch the directory. Image ids are content hashes, so what was learned stays true. Bounded (oldest first).
 */
export class ImageSessionsMemo {
  readonly #known = new Map<string, ImageSessionsContent>();
  constructor(private readonly capacity = 1_000) {}

  static #key(imageId: string, dir: string): string {
    return `${imageId}\0${normalized(dir)}`;
  }

  get(imageId: string, dir: string): ImageSessionsContent | undefined {
    return imageId === '' ? undefined : this.#known.get(ImageSessionsMemo.#key(imageId, dir));
  }

  /** Records what the image holds at `dir`; true when that is news (not known, or known otherwise). */
  learn(imageId: string, dir: string, content: ImageSessionsContent): boolean {
    if (imageId === '') return false;
    const key = ImageSessionsMemo.#key(imageId, dir);
    const news = this.#known.get(key) !== content;
    this.#known.delete(key);
    this.#known.set(key, content);
    if (this.#known.size > this.capacity) {
      const oldest = this.#known.keys().next().value;
      if (oldest !== undefined) this.#known.delete(oldest);
    }
    return news;
  }

  /** Everything known, oldest first (what a persistent memo writes down). */
  entries(): ImageSessionsFact[] {
    return [...this.#known].map(([key, content]) => {
      const cut = key.indexOf('\0');
      return { imageId: key.slice(0, cut), dir: key.slice(cut + 1), content };
    });
  }
}

/** One thing learned: what the image `imageId` holds at `dir`. */
export interface ImageSessionsFact {
  readonly imageId: string;
  readonly dir: string;
  readonly content: ImageSessionsContent;
}
