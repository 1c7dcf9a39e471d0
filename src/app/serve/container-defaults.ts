import { posix } from 'node:path';
import type { ContainerDefaults, SessionEngine } from '../ports/container-runtime.js';

/** Each session container's working directory and default user, asked of the engine once (they never change). */
export class ContainerDefaultsCache {
  readonly #known = new Map<string, Promise<ContainerDefaults>>();
  constructor(readonly engine: Pick<SessionEngine, 'containerDefaults'>) {}

  of(containerId: string): Promise<ContainerDefaults> {
    let known = this.#known.get(containerId);
    if (known === undefined) {
      known = this.engine.containerDefaults(containerId).then((d) => d ?? { workingDir: '', user: '' });
      known.catch(() => this.#known.delete(containerId));
      this.#known.set(containerId, known);
    }
    return known;
  }

  /**
   * A path in the container: an absolute one as given (normalized), a relative one against the session's working
   * directory (its workdir, else the image's WorkingDir, else /). `..` never climbs above `/`.
   */
  async resolvePath(containerId: string, path: string): Promise<string> {
    if (path.startsWith('/')) return posix.resolve(path);
    const { workingDir } = await this.of(containerId);
    return posix.resolve(workingDir.startsWith('/') ? workingDir : '/', path);
  }

  forget(containerId: string): void {
    this.#known.delete(containerId);
  }
}
