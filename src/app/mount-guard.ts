/**
 * The launch-time mount check (docs/spec.md 5.3): what `e1-batch start` and `pair run` checked may have changed
 * since (a pair sharing a parent folder, anything on the host), so just before a pair's container is created its
 * bind sources are walked again from `/` with lstat: no component may be a symlink, a non-folder, or owned by
 * anyone but the expected owners; missing folders are made one component at a time (mkdir, then lstat), never
 * through a link; the mount rules run again on the path so found (link-free, hence real); and the engine gets that
 * path. Right after the create and right after the start, each source is walked again and must still be the same
 * folder (device and inode): refused after the create, the container is removed before it ever starts; refused
 * after the start, it is killed at once. Any refusal fails the pair closed with the reason `mount_refused`.
 */
import {
  checkMounts,
  DEFAULT_HOME_PATHS,
  normalizeAbsolute,
  SYSTEM_PATHS,
  type ProtectedPaths,
} from '../core/mount-policy.js';
import { ToolError } from '../core/errors.js';
import { pausepoint } from './failpoints.js';
import type { ContainerRuntime, ContainerSpec } from './ports/container-runtime.js';
import { errnoOf, type FileSystem } from './ports/file-system.js';

/** A refusal of the launch-time mount check: `field` names the mount (`cwd`, `outcome folder`), `rule` the cause. */
export class MountRefusedError extends ToolError {
  constructor(
    readonly field: string,
    readonly rule: string,
  ) {
    super('E_MOUNT_REFUSED', `${field}: ${rule}`);
    this.name = 'MountRefusedError';
  }
}

export interface MountGuardOptions {
  /** The mount rules, already resolved to real paths (job-paths.ts `resolveProtected`); absent: the built-in rules only. */
  readonly rules?: ProtectedPaths;
  /** Who may own each component of a source (root and the supervisor's user); absent: owners are not checked. */
  readonly owners?: readonly number[];
}

/** One checked folder: its link-free (real) path and which folder it was (`dev:ino`). */
export interface CheckedFolder {
  readonly path: string;
  readonly fileId: string;
  /** The identity of every component from `/` down to the folder itself. */
  readonly componentIds: readonly string[];
}

/**
 * Walks `path` from `/` component by component with lstat (and, with `create`, makes each missing folder with
 * mkdir, then lstats it): refuses a symlink, a non-folder, an unexpected owner, or a file system that cannot say
 * which file a folder is. Returns the link-free path and the final folder's identity.
 */
export async function checkFolder(
  fs: FileSystem,
  path: string,
  field: string,
  options: {
    readonly create: boolean;
    readonly owners?: readonly number[] | undefined;
    /** Called for each component that passed (from `/` down), before the next one is made: throws to refuse. */
    readonly inspect?: (index: number, path: string, fileId: string | undefined) => void;
  },
): Promise<CheckedFolder> {
  if (!path.startsWith('/')) throw new MountRefusedError(field, `${path} is not absolute`);
  // `..` is resolved textually only after a link-free walk would be the same: refuse it instead of guessing.
  if (path.split('/').includes('..')) throw new MountRefusedError(field, `${path} holds a ".." component`);
  const normalized = normalizeAbsolute(path);
  const segments = normalized.split('/').filter((s) => s !== '');
  let current = '';
  let fileId: string | undefined;
  const componentIds: string[] = [];
  for (const segment of ['', ...segments]) {
    current = segment === '' ? '/' : `${current === '/' ? '' : current}/${segment}`;
    let info = await lstatOrNull(fs, current, field);
    if (info === null) {
      if (!options.create) throw new MountRefusedError(field, `${current} does not exist`);
      await fs.mkdir(current, 0o777).catch((err: unknown) => {
        // Someone made it meanwhile: the lstat below decides what it is.
        if (errnoOf(err) !== 'EEXIST')
          throw new MountRefusedError(field, `cannot create ${current} (${errnoOf(err) ?? 'error'})`);
      });
      info = await lstatOrNull(fs, current, field);
      if (info === null) throw new MountRefusedError(field, `${current} vanished while it was created`);
    }
    if (info.kind === 'symlink')
      throw new MountRefusedError(field, `${current} is a symbolic link (a link could redirect the mount)`);
    if (info.kind !== 'directory') throw new MountRefusedError(field, `${current} is not a folder`);
    if (options.owners !== undefined && (info.uid === undefined || !options.owners.includes(info.uid))) {
      throw new MountRefusedError(
        field,
        `${current} is owned by user ${info.uid ?? 'unknown'}, not by root or the supervisor's user (its owner could swap it)`,
      );
    }
    fileId = info.fileId;
    if (fileId !== undefined) componentIds.push(fileId);
    options.inspect?.(componentIds.length - 1, current, fileId);
  }
  if (fileId === undefined)
    throw new MountRefusedError(field, `the file system does not say which folder ${normalized} is`);
  return { path: normalized, fileId, componentIds };
}

/**
 * A protected folder under another name (a bind mount of `/etc` elsewhere, `/` bound into a work folder): the path
 * rules cannot see it, the folders' identities can. A component below `/` that is a folder no mount may lie inside
 * is refused as the walk reaches it; the folder itself being `/` or a home is refused once the walk is done.
 */
function refuseAlias(
  field: string,
  ids: ProtectedIds,
  index: number,
  path: string,
  id: string | undefined,
): void {
  const inside = index > 0 && id !== undefined ? ids.inside.get(id) : undefined;
  if (inside !== undefined)
    throw new MountRefusedError(field, `${path} is ${inside} under another name (a bind mount of it)`);
}

interface ProtectedIds {
  /** Identity → folder no mount may lie inside (system folders, the engine's and our own folders, the output). */
  readonly inside: ReadonlyMap<string, string>;
  /** Identity → folder no mount may be (`/`, the homes). */
  readonly be: ReadonlyMap<string, string>;
}

/** The identities of the protected folders that exist (each followed through its links first). */
async function protectedIdentities(fs: FileSystem, rules: ProtectedPaths): Promise<ProtectedIds> {
  const idOf = async (path: string): Promise<string | undefined> => {
    try {
      return (await fs.lstat(await fs.realpath(path))).fileId;
    } catch {
      return undefined;
    }
  };
  const mapOf = async (paths: readonly string[]): Promise<Map<string, string>> => {
    const map = new Map<string, string>();
    for (const path of new Set(paths)) {
      const id = await idOf(path);
      if (id !== undefined && !map.has(id)) map.set(id, path);
    }
    return map;
  };
  const inside = [
    ...SYSTEM_PATHS,
    ...(rules.ownedDirs ?? []),
    ...(rules.outputDir !== undefined ? [rules.outputDir] : []),
  ];
  const be = [
    '/',
    ...DEFAULT_HOME_PATHS,
    ...(rules.homeDir !== undefined ? [rules.homeDir] : []),
    ...(rules.homeDirs ?? []),
  ];
  return { inside: await mapOf(inside), be: await mapOf(be) };
}

async function lstatOrNull(
  fs: FileSystem,
  path: string,
  field: string,
): Promise<Awaited<ReturnType<FileSystem['lstat']>> | null> {
  try {
    return await fs.lstat(path);
  } catch (err) {
    if (errnoOf(err) === 'ENOENT') return null;
    throw new MountRefusedError(field, `cannot inspect ${path} (${errnoOf(err) ?? 'error'})`);
  }
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
      const handle = await runtime.create(await this.#refuseOr(() => this.#prepare(spec)));
      try {
        await this.#refuseOr(() => this.#verify('while the container was created'));
      } catch (err) {
        // Never started: removed here (the lifecycle never learns of it, so no log stream waits on it), 404 checked.
        await runtime.remove(handle.id).catch(() => undefined);
        if ((await runtime.inspect(handle.id).catch(() => undefined)) !== null) this.#unremoved = handle.id;
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
        : null;
      const checked = await checkFolder(this.fs, bind.hostPath, field, {
        create: guarded,
        owners: this.options.owners,
        ...(ids !== null ? { inspect: (index, path, id) => refuseAlias(field, ids, index, path, id) } : {}),
      });
      if (ids !== null) {
        const be = ids.be.get(checked.fileId);
        if (be !== undefined)
          throw new MountRefusedError(
            field,
            `${checked.path} is ${be} under another name (a bind mount of it)`,
          );
      }
      this.#guarded.push({ field, specPath: bind.hostPath, checked });
      binds.push({ ...bind, hostPath: checked.path });
    }
    // Tests swap a folder here, between the check and the create.
    await pausepoint('mount_checked');
    return { ...spec, binds };
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
