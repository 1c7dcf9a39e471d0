/**
 * The launch-time mount check (docs/spec.md 5.3): what `e1-batch start` and `pair run` checked may have changed
 * since (a pair sharing a parent folder, anything on the host), so just before a pair's container is created its
 * bind sources are walked again from `/` (mount-stage.ts): no component may be a symlink, a non-folder, or owned by
 * anyone but the expected owners; missing folders are made one component at a time, never through a link; the mount
 * rules run again on the path so found (link-free, hence real). In the `staged` mode each component is opened inside
 * the one before and the opened folder is bound onto a staging point the engine gets: no later swap of the path can
 * redirect the mount. In the `walked` mode (the host refused the bind) the engine gets the link-free path. Either
 * way, right after the create and right after the start, each source is walked again and must still be the same
 * folder (device and inode): refused after the create, the container is removed before it ever starts; refused
 * after the start, it is killed at once. Any refusal fails the pair closed with the reason `mount_refused`.
 */
import { checkMounts, normalizeAbsolute, type ProtectedPaths } from '../../core/mount-policy.js';
import { pausepoint } from '../ports/failpoints.js';
import {
  checkFolder,
  MountRefusedError,
  protectedIdentities,
  type CheckedFolder,
  type ProtectedIds,
} from '../mount-walk.js';
import type { ContainerRuntime, ContainerSpec } from '../ports/container-runtime.js';
import type { FileSystem } from '../ports/file-system.js';
import type { MountStager } from '../ports/mount-stager.js';
import { guardedSource } from '../mount-stage.js';

export interface MountGuardOptions {
  /** The mount rules, already resolved to real paths (job-paths.ts `resolveProtected`); absent: the built-in rules only. */
  readonly rules?: ProtectedPaths;
  /** Who may own each component of a source (root and the supervisor's user); absent: owners are not checked. */
  readonly owners?: readonly number[];
  /** Stages the sources (docs/spec.md 5.3) when the host lets it; absent: the `walked` mode. */
  readonly stager?: MountStager;
}

/** Guarded bind: the spec's source, the path given to the engine, and the folder it was. */
interface Guarded {
  readonly field: string;
  readonly specPath: string;
  readonly checked: CheckedFolder;
}

/**
 * One pair's guard: `wrap(runtime)` returns the runtime the lifecycle uses, whose `create` checks and prepares
 * every bind source (the rules apply to every bind but the `collect` one, the pair's private outcome folder inside
 * the evidence, which only has to be link-free and ours), gives the engine the checked paths and verifies them once
 * the container exists, and whose `start` verifies them again once it runs. `refusal` is what refused, or null.
 */
export class MountGuard {
  #refusal: MountRefusedError | null = null;
  #guarded: Guarded[] = [];
  #unremoved: string | null = null;
  #protectedIds: Promise<ProtectedIds> | null = null;
  #staged: string[] = [];

  constructor(
    private readonly fs: FileSystem,
    private readonly options: MountGuardOptions,
  ) {}

  get refusal(): MountRefusedError | null {
    return this.#refusal;
  }

  /** A container the guard refused right after its create and could not see gone (the engine did not confirm the 404). */
  get unremoved(): string | null {
    return this.#unremoved;
  }

  wrap(runtime: ContainerRuntime): ContainerRuntime {
    const create: ContainerRuntime['create'] = async (spec) => {
      let handle: Awaited<ReturnType<ContainerRuntime['create']>>;
      try {
        handle = await runtime.create(await this.#refuseOr(() => this.#prepare(spec)));
      } catch (err) {
        // Refused, or the engine made nothing: no container uses the staging points.
        await this.release();
        throw err;
      }
      for (const path of this.#staged) this.options.stager?.settled(path);
      try {
        await this.#refuseOr(() => this.#verify('while the container was created'));
      } catch (err) {
        // Never started: removed here (the lifecycle never learns of it, so no log stream waits on it), 404 checked.
        await runtime.remove(handle.id).catch(() => undefined);
        if ((await runtime.inspect(handle.id).catch(() => undefined)) !== null) this.#unremoved = handle.id;
        else await this.release();
        throw err;
      }
      return handle;
    };
    const start: ContainerRuntime['start'] = async (id) => {
      await runtime.start(id);
      try {
        await this.#refuseOr(() => this.#verify('while the container started'));
      } catch (err) {
        // Killed at once; the lifecycle collects and removes it as after any failed start.
        await runtime.stop(id, 0).catch(() => undefined);
        throw err;
      }
    };
    // Every other call goes to the runtime itself (bound: adapters keep private fields).
    return new Proxy(runtime, {
      get(target, prop) {
        if (prop === 'create') return create;
        if (prop === 'start') return start;
        const value: unknown = Reflect.get(target, prop, target);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
  }

  async #refuseOr<T>(step: () => Promise<T>): Promise<T> {
    try {
      return await step();
    } catch (err) {
      if (err instanceof MountRefusedError) this.#refusal ??= err;
      throw err;
    }
  }

  async #prepare(spec: ContainerSpec): Promise<ContainerSpec> {
    const binds: ContainerSpec['binds'][number][] = [];
    const stager = this.options.stager ?? null;
    const mode = stager === null ? 'walked' : await stager.mode();
    for (const bind of spec.binds) {
      const field =
        bind.collect === true
          ? 'outcome folder'
          : bind.containerPath === spec.workingDir
            ? 'cwd'
            : `mount ${bind.containerPath}`;
      const guarded = bind.collect !== true;
      // The rules first, on the path as it will be once the walk found no link (then it is its real path), and the
      // identities on the way down: nothing is made inside a protected folder before it is refused.
      if (guarded && !bind.hostPath.split('/').includes('..')) {
        const normalized = normalizeAbsolute(bind.hostPath);
        const issue = checkMounts([{ field, hostPath: normalized }], this.options.rules ?? {})[0];
        if (issue !== undefined) throw new MountRefusedError(field, `${normalized} ${issue.message}`);
      }
      const ids = guarded
        ? await (this.#protectedIds ??= protectedIdentities(this.fs, this.options.rules ?? {}))
        : undefined;
      // The pair's private outcome folder (ours, inside the evidence) is walked; every other source is staged.
      const source = await guardedSource(
        { fs: this.fs, stager },
        guarded ? mode : 'walked',
        bind.hostPath,
        field,
        {
          create: guarded,
          owners: this.options.owners,
          ids,
          readOnly: bind.readOnly,
          scanEndpoints: guarded,
        },
      );
      if (source.stagedPath !== null) this.#staged.push(source.stagedPath);
      this.#guarded.push({ field, specPath: bind.hostPath, checked: source.checked });
      binds.push({ ...bind, hostPath: source.engineSource });
    }
    // Tests swap a folder here, between the check and the create.
    await pausepoint('mount_checked');
    return { ...spec, binds };
  }

  /**
   * Unmounts the staging points of this pair's binds: once its container is gone (verified), or was never made.
   * A container not seen gone keeps them (a later sweep releases them once the engine no longer has it).
   */
  async release(): Promise<void> {
    const staged = this.#staged.splice(0);
    for (const path of staged) await this.options.stager?.release(path).catch(() => undefined);
  }

  async #verify(when: string): Promise<void> {
    for (const g of this.#guarded) {
      const now = await checkFolder(this.fs, g.checked.path, g.field, {
        create: false,
        owners: this.options.owners,
      });
      if (now.fileId !== g.checked.fileId) {
        throw new MountRefusedError(
          g.field,
          `${g.checked.path} was replaced ${when} (another folder than the one checked)`,
        );
      }
    }
  }
}
