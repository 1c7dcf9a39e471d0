import type { ContainerDiskFootprint } from '../../app/ports/container-runtime.js';

interface FootprintMount {
  readonly Type?: string;
  readonly Source?: string;
}

/** The parts of a container's inspect (with `size=1`) that its disk footprint reads. */
export interface FootprintInspect {
  readonly SizeRw?: number;
  readonly State?: { readonly Pid?: number; readonly Running?: boolean };
  readonly Mounts?: readonly FootprintMount[] | null;
  readonly HostsPath?: string;
  readonly ResolvConfPath?: string;
  readonly HostnamePath?: string;
}

/**
 * A container's disk outside the pair's folders, from its inspect: the writable layer (`SizeRw`), the host folders
 * of its volumes (`Mounts` of type `volume`, their `Source`: an image's `VOLUME` becomes an anonymous one, outside
 * the layer), the engine's own files it binds read-write into the container (`/etc/hosts`, `/etc/resolv.conf`,
 * `/etc/hostname`: files under the engine's data root, outside the layer too) and its first process while it runs.
 */
export function diskFootprintOf(c: FootprintInspect): ContainerDiskFootprint {
  const mounts: readonly FootprintMount[] = Array.isArray(c.Mounts) ? (c.Mounts as FootprintMount[]) : [];
  const pid = c.State?.Pid;
  const volumeDirs: string[] = [];
  for (const m of mounts) {
    if (m.Type === 'volume' && typeof m.Source === 'string' && m.Source.startsWith('/'))
      volumeDirs.push(m.Source);
  }
  for (const file of [c.HostsPath, c.ResolvConfPath, c.HostnamePath]) {
    if (typeof file === 'string' && file.startsWith('/')) volumeDirs.push(file);
  }
  return {
    layerBytes: typeof c.SizeRw === 'number' && c.SizeRw >= 0 ? c.SizeRw : 0,
    volumeDirs,
    pid: c.State?.Running === true && typeof pid === 'number' && pid > 0 ? pid : null,
  };
}
