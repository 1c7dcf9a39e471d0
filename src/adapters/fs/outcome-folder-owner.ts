import { chmod, chown, lstat } from 'node:fs/promises';
import type { ContainerEngine } from '../../app/ports/container-runtime.js';
import { userNamespaceOf } from '../../core/host-privilege.js';

/**
 * A pair's private outcome folder, opened to the container's root when the engine remaps it (Docker `userns-remap`:
 * container root is host uid 100000 or so, and a folder of host root's is not writable from inside: every pair ended
 * `outcome_missing`, measured on engine 20.10). The folder keeps its owner (the mount guard accepts root or the
 * supervisor's user only) and gets the remapped root's group with rwx for the group (0770). Without a remap (or when
 * the engine does not say to which ids), nothing changes. The engine is asked once per process; a failed answer is
 * asked again next time.
 */
export function outcomeFolderOwner(runtime: Pick<ContainerEngine, 'info'>): (dir: string) => Promise<void> {
  let owner: Promise<{ uid: number; gid: number } | null> | undefined;
  const ownerOf = (): Promise<{ uid: number; gid: number } | null> =>
    (owner ??= runtime.info().then(
      (info) => {
        const ns = userNamespaceOf(info);
        return ns.kind === 'remap' && ns.uid !== null && ns.gid !== null
          ? { uid: ns.uid, gid: ns.gid }
          : null;
      },
      (err: unknown) => {
        owner = undefined;
        throw err;
      },
    ));
  return async (dir) => {
    const ids = await ownerOf();
    if (ids === null) return;
    const st = await lstat(dir);
    await chown(dir, st.uid, ids.gid);
    await chmod(dir, 0o770);
  };
}
