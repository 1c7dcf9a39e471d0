/**
 * The walk of one bind source from `/` (docs/spec.md 5.3), shared by pairs (mount-guard.ts) and serve sessions
 * (serve/session-create.ts): `checkFolder` with lstat (the `walked` mode), `stageFolder` through opened folders
 * (the `staged` mode: mount-stage.ts), the identities of the protected folders, and the refusal they throw.
 */
import {
  DEFAULT_HOME_PATHS,
  normalizeAbsolute,
  SYSTEM_PATHS,
  type ProtectedPaths,
} from '../core/mount-policy.js';
import { ToolError } from '../core/errors.js';
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
export function refuseAlias(
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

export interface ProtectedIds {
  /** Identity → folder no mount may lie inside (system folders, the engine's and our own folders, the output). */
  readonly inside: ReadonlyMap<string, string>;
  /** Identity → folder no mount may be (`/`, the homes). */
  readonly be: ReadonlyMap<string, string>;
}

/** The identities of the protected folders that exist (each followed through its links first). */
export async function protectedIdentities(fs: FileSystem, rules: ProtectedPaths): Promise<ProtectedIds> {
  const idOf = async (path: string): Promise<string | undefined> => {
    try {
      return (await fs.lstat(await fs.realpath(path))).fileId;
    } catch {
      return undefined;
    }
  };
  // Asked all at once (about 50 folders, two file-system calls each: one after another they held a pair's start
  // about 10 ms, issue 39); the first path named keeps an identity, as before.
  const mapOf = async (paths: readonly string[]): Promise<Map<string, string>> => {
    const unique = [...new Set(paths)];
    const ids = await Promise.all(unique.map(idOf));
    const map = new Map<string, string>();
    unique.forEach((path, i) => {
      const id = ids[i];
      if (id !== undefined && !map.has(id)) map.set(id, path);
    });
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
  const [insideIds, beIds] = await Promise.all([mapOf(inside), mapOf(be)]);
  return { inside: insideIds, be: beIds };
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
