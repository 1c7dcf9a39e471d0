import { randomUUID } from 'node:crypto';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { CpuFact, GpuController, OsFact } from '../../core/host-facts.js';
import { makeDirs } from '../fs/make-dirs.js';

/** The facts that cannot change while the machine runs (CPU, kernel and distro, PCI controllers), kept per boot. */
export interface StaticFacts {
  readonly cpu?: CpuFact;
  readonly os?: OsFact;
  readonly gpuControllers?: readonly GpuController[];
}

/**
 * A small JSON file (`{boot_id, facts}`) beside the host registry: the static facts cost most of systeminformation's
 * commands (lscpu, dmidecode, lspci, hostname…), so each boot asks for them once. A file of another boot, an
 * unreadable one or a failed write only means asking again; only known facts are kept.
 */
export class StaticFactsCache {
  readonly #path: string;
  readonly #bootId: () => Promise<string | null>;
  #loaded: Promise<{ bootId: string | null; facts: StaticFacts }> | null = null;
  #writes: Promise<void> = Promise.resolve();

  constructor(path: string, bootId: () => Promise<string | null>) {
    this.#path = path;
    this.#bootId = bootId;
  }

  async get<K extends keyof StaticFacts>(key: K): Promise<StaticFacts[K] | undefined> {
    return (await this.#load()).facts[key];
  }

  /** Records a known fact (serialized: the file always holds every fact remembered so far). */
  remember<K extends keyof StaticFacts>(key: K, value: NonNullable<StaticFacts[K]>): Promise<void> {
    this.#writes = this.#writes.then(async () => {
      const loaded = await this.#load();
      if (loaded.bootId === null) return; // without a boot id the file could outlive a reboot unnoticed
      loaded.facts = { ...loaded.facts, [key]: value };
      const temp = `${this.#path}.${randomUUID().slice(0, 8)}.tmp`;
      try {
        await makeDirs(dirname(this.#path), 0o700);
        await writeFile(temp, JSON.stringify({ boot_id: loaded.bootId, facts: loaded.facts }), {
          mode: 0o600,
        });
        await rename(temp, this.#path);
      } catch {
        // a cache: the next run asks again
      }
    });
    return this.#writes;
  }

  #load(): Promise<{ bootId: string | null; facts: StaticFacts }> {
    this.#loaded ??= (async () => {
      const bootId = await this.#bootId().catch(() => null);
      try {
        const file = JSON.parse(await readFile(this.#path, 'utf8')) as {
          boot_id?: unknown;
          facts?: StaticFacts;
        };
        if (
          bootId !== null &&
          file.boot_id === bootId &&
          typeof file.facts === 'object' &&
          file.facts !== null
        )
          return { bootId, facts: file.facts };
      } catch {
        // absent or unreadable: ask
      }
      return { bootId, facts: {} };
    })();
    return this.#loaded;
  }
}
