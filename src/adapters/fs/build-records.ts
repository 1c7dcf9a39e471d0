import { randomUUID } from 'node:crypto';
import { readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { BuildRecord, BuildRecords } from '../../app/ports/image-builds.js';
import { InternalError } from '../../core/errors.js';
import { makeDirs } from './make-dirs.js';

/** Build records as one JSON file per cache key under `<data dir>/builds/`, each written atomically (temp + rename). */
export class FileBuildRecords implements BuildRecords {
  readonly #dir: string;

  constructor(dataDir: string) {
    this.#dir = join(dataDir, 'builds');
  }

  #path(key: string): string {
    if (!/^[0-9a-f]{64}$/.test(key)) throw new InternalError(`not a build cache key: ${key}`);
    return join(this.#dir, `${key}.json`);
  }

  async read(key: string): Promise<BuildRecord | null> {
    let text: string;
    try {
      text = await readFile(this.#path(key), 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
    try {
      const parsed = JSON.parse(text) as Partial<BuildRecord>;
      return typeof parsed.id === 'string' && typeof parsed.tag === 'string'
        ? { id: parsed.id, tag: parsed.tag }
        : null;
    } catch {
      return null;
    }
  }

  async write(key: string, record: BuildRecord): Promise<void> {
    const path = this.#path(key);
    await makeDirs(this.#dir, 0o700);
    const temp = `${path}.${randomUUID()}.tmp`;
    try {
      await writeFile(temp, `${JSON.stringify({ id: record.id, tag: record.tag })}\n`, { mode: 0o600 });
      await rename(temp, path);
    } finally {
      await rm(temp, { force: true });
    }
  }
}
