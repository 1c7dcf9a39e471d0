/**
 * One bind source made safe to hand to the engine (docs/spec.md 5.3), the same for a pair's binds (mount-guard.ts)
 * and a serve session's mounts (serve/session-create.ts). `staged`: the source is opened from `/` one component at a
 * time relative to the folder opened before it (never following a link, never resolving a path twice), each opened
 * component is checked (a folder, its owner, not a protected folder under another name), and the opened folder
 * itself is bound onto a staging point that the engine gets: a later swap of the path changes nothing the engine
 * sees. `walked` (the host refused the bind): today's lstat walk, and the engine gets the link-free path.
 */
import type { MountMode } from '../core/mount-mode.js';
import { normalizeAbsolute } from '../core/mount-policy.js';
import {
  checkFolder,
  MountRefusedError,
  refuseAlias,
  type CheckedFolder,
  type ProtectedIds,
} from './mount-walk.js';
import { errnoOf, type FileSystem } from './ports/file-system.js';
import type { MountStager, OpenedFolder } from './ports/mount-stager.js';

export interface SourceOptions {
  /** Make missing folders (one component at a time, inside the folder opened before). */
  readonly create: boolean;
  /** Who may own each component; absent: owners are not checked. */
  readonly owners?: readonly number[] | undefined;
  /** The protected folders' identities: none may be reached under another name; absent: not checked. */
  readonly ids?: ProtectedIds | undefined;
  readonly readOnly: boolean;
  /** Refuse a source that holds a socket or a FIFO (ipcEndpointIn); the pair's private outcome folder is not scanned. */
  readonly scanEndpoints?: boolean;
}

/** How many entries the endpoint scan looks at, at most, before it lets a source pass (a large cwd). */
export const ENDPOINT_SCAN_ENTRIES = 20_000;

/**
 * The first socket or FIFO under `root` (breadth first, never through a link, at most ENDPOINT_SCAN_ENTRIES entries),
 * or null. A host process listening there (a root tmux server, an ssh agent, a database) would take a container's
 * connect or write as its own user's command: read-only mounts do not stop a connect() (the second review ran a
 * command as host root through a read-only mount of a root tmux socket's folder).
 */
export async function ipcEndpointIn(fs: Pick<FileSystem, 'readdir'>, root: string): Promise<string | null> {
  const folders = [root];
  let seen = 0;
  for (let folder = folders.shift(); folder !== undefined; folder = folders.shift()) {
    const entries = await fs.readdir(folder).catch(() => []);
    for (const entry of entries) {
      if (++seen > ENDPOINT_SCAN_ENTRIES) return null;
      const path = `${folder === '/' ? '' : folder}/${entry.name}`;
      if (entry.special === 'socket' || entry.special === 'fifo') return path;
      if (entry.kind === 'directory') folders.push(path);
    }
  }
  return null;
}

async function refuseEndpoints(
  fs: Pick<FileSystem, 'readdir'>,
  checked: CheckedFolder,
  field: string,
  options: SourceOptions,
): Promise<void> {
  if (options.scanEndpoints !== true) return;
  const endpoint = await ipcEndpointIn(fs, checked.path);
  if (endpoint !== null)
    throw new MountRefusedError(
      field,
      `${checked.path} holds ${endpoint}, a socket or FIFO: a container reaching it would speak to the host process behind it (read-only mounts do not stop that)`,
    );
}

/** A source ready for the engine: the folder checked, and the path the engine gets (the staging point when staged). */
export interface GuardedSource {
  readonly checked: CheckedFolder;
  readonly engineSource: string;
  /** The staging point (the same as engineSource), which `MountStager.release` unmounts once no container uses it. */
  readonly stagedPath: string | null;
}

/** Walks, checks and (staged) binds one source; throws MountRefusedError naming `field` and the rule. */
export async function guardedSource(
  ports: { readonly fs: FileSystem; readonly stager: MountStager | null },
  mode: MountMode,
  path: string,
  field: string,
  options: SourceOptions,
): Promise<GuardedSource> {
  const { ids } = options;
  const inspect =
    ids === undefined
      ? undefined
      : (index: number, at: string, id: string | undefined) => refuseAlias(field, ids, index, at, id);
  const final = (checked: CheckedFolder): void => {
    const be = ids?.be.get(checked.fileId);
    if (be !== undefined)
      throw new MountRefusedError(field, `${checked.path} is ${be} under another name (a bind mount of it)`);
  };
  if (mode === 'walked' || ports.stager === null) {
    const checked = await checkFolder(ports.fs, path, field, {
      create: options.create,
      owners: options.owners,
      ...(inspect !== undefined ? { inspect } : {}),
    });
    final(checked);
    await refuseEndpoints(ports.fs, checked, field, options);
    return { checked, engineSource: checked.path, stagedPath: null };
  }
  return stageFolder(ports.stager, path, field, {
    ...options,
    ...(inspect !== undefined ? { inspect } : {}),
    final,
    beforeBind: (checked) => refuseEndpoints(ports.fs, checked, field, options),
  });
}

/**
 * The `staged` walk: each component opened inside the one before (O_PATH|O_NOFOLLOW|O_DIRECTORY), checked on the
 * object opened, then the last one bound onto a staging point. Nothing is ever resolved by path after it was checked.
 */
export async function stageFolder(
  stager: MountStager,
  path: string,
  field: string,
  options: SourceOptions & {
    readonly inspect?: (index: number, path: string, fileId: string | undefined) => void;
    readonly final?: (checked: CheckedFolder) => void;
    readonly beforeBind?: (checked: CheckedFolder) => Promise<void>;
  },
): Promise<GuardedSource> {
  if (!path.startsWith('/')) throw new MountRefusedError(field, `${path} is not absolute`);
  if (path.split('/').includes('..')) throw new MountRefusedError(field, `${path} holds a ".." component`);
  const normalized = normalizeAbsolute(path);
  const segments = normalized.split('/').filter((s) => s !== '');
  let folder = await stager.openRoot();
  try {
    const componentIds: string[] = [];
    let current = '/';
    const check = (opened: OpenedFolder): void => {
      const { uid, fileId } = opened.info;
      if (options.owners !== undefined && (uid === undefined || !options.owners.includes(uid)))
        throw new MountRefusedError(
          field,
          `${current} is owned by user ${uid ?? 'unknown'}, not by root or the supervisor's user (its owner could swap it)`,
        );
      if (fileId === undefined)
        throw new MountRefusedError(field, `the file system does not say which folder ${current} is`);
      componentIds.push(fileId);
      options.inspect?.(componentIds.length - 1, current, fileId);
    };
    check(folder);
    for (const segment of segments) {
      current = `${current === '/' ? '' : current}/${segment}`;
      const child = await openComponent(stager, folder, segment, current, field, options.create);
      await stager.close(folder);
      folder = child;
      check(folder);
    }
    const checked = { path: normalized, fileId: componentIds[componentIds.length - 1] ?? '', componentIds };
    options.final?.(checked);
    await options.beforeBind?.(checked);
    const stagedPath = await stager.bind(folder, options.readOnly).catch((err: unknown) => {
      // mount(2) refuses a folder removed since it was opened (ENOENT): the source the caller named is gone.
      const why = err instanceof Error ? (err.message.split('\n')[0] ?? err.message) : 'error';
      throw new MountRefusedError(field, `${normalized} could not be staged (removed meanwhile?): ${why}`);
    });
    return { checked, engineSource: stagedPath, stagedPath };
  } finally {
    await stager.close(folder).catch(() => undefined);
  }
}

/** One component opened inside `parent` (made first when missing and `create`), or refused with what it was. */
async function openComponent(
  stager: MountStager,
  parent: OpenedFolder,
  name: string,
  current: string,
  field: string,
  create: boolean,
): Promise<OpenedFolder> {
  let child = await stager.openChild(parent, name);
  if (child.kind === 'missing') {
    if (!create) throw new MountRefusedError(field, `${current} does not exist`);
    await stager.makeChild(parent, name, 0o777).catch((err: unknown) => {
      // Someone made it meanwhile: the open below decides what it is.
      if (errnoOf(err) !== 'EEXIST')
        throw new MountRefusedError(field, `cannot create ${current} (${errnoOf(err) ?? 'error'})`);
    });
    child = await stager.openChild(parent, name);
    if (child.kind === 'missing')
      throw new MountRefusedError(field, `${current} vanished while it was created`);
  }
  switch (child.kind) {
    case 'opened':
      return child.folder;
    case 'symlink':
      throw new MountRefusedError(field, `${current} is a symbolic link (a link could redirect the mount)`);
    case 'not-folder':
      throw new MountRefusedError(field, `${current} is not a folder`);
    default:
      throw new MountRefusedError(
        field,
        `cannot inspect ${current} (${child.kind === 'error' ? child.errno : 'gone'})`,
      );
  }
}
