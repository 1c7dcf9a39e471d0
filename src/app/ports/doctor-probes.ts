import type { MountOptions } from '../../core/disk-quota.js';
import type { MountMode } from '../../core/mount-mode.js';
import type { GpuObservation } from '../../core/gpu/nvidia-smi-parse.js';
import type { HostFactsRecord } from '../../core/host-facts.js';
import type { ContainerRuntime } from './container-runtime.js';
import type { GpuGrants } from './runtime-capabilities.js';
import type { HostFactsRequest } from './host-facts.js';
import type { PairNetworkGuard } from './pair-network.js';
import type { Clock } from './clock.js';

/**
 * What `doctor` (src/app/doctor/run-doctor.ts) asks of the host: the probes behind its checks. `createDoctorDeps`
 * (src/adapters/doctor-probes.ts) wires the real ones; unit tests pass fakes.
 */

/** Where the registry check writes: an explicit file (created when missing), or a throwaway temp database. */
export type RegistryTarget =
  | { readonly kind: 'file'; readonly path: string }
  | { readonly kind: 'temp' }
  /** `display`: the URL without its password; `connection` is opaque here (the probe's adapter reads it). */
  | { readonly kind: 'postgres'; readonly display: string; readonly connection: unknown };

/** What a registry probe read: the schema version the database records and the one this tool writes. */
export interface RegistryProbe {
  readonly schema: { readonly current: number; readonly supported: number } | null;
}

/** The world as `doctor` sees it; `createDoctorDeps` wires the real one, unit tests pass fakes. */
export interface DoctorDeps {
  readonly runtime: Pick<
    ContainerRuntime,
    'info' | 'imageExists' | 'create' | 'attach' | 'start' | 'wait' | 'remove' | 'inspect'
  > &
    GpuGrants &
    Partial<Pick<ContainerRuntime, 'follow'>>;
  readonly observeGpus: () => Promise<GpuObservation>;
  readonly fileExists: (path: string) => Promise<boolean>;
  /** Proves a write (rolled back) and reads the schema version; throws when the registry cannot be reached or written. */
  readonly probeRegistry: (target: RegistryTarget) => Promise<RegistryProbe | void>;
  /** Free bytes for an unprivileged user on the filesystem holding `path` (or its nearest existing ancestor). */
  readonly freeDiskBytes: (path: string) => Promise<{ readonly path: string; readonly freeBytes: number }>;
  readonly readBootId: () => Promise<string | null>;
  /** The mount holding `path`, with its options (for the project quota line); absent: not told. */
  readonly mountOptionsOf?: (path: string) => Promise<MountOptions | null>;
  /** CPU, memory, OS, the file systems of the output directory and the engine's data root, GPU controllers; never rejects. */
  readonly hostFacts: (request: HostFactsRequest) => Promise<HostFactsRecord>;
  /** The probes' deadlines and their timers. */
  readonly clock: Clock;
  readonly newId: () => string;
  /** The guarded pairs network of the local engine (`engine-bridge`: turned off by ROBOGUIDE_PAIRS_NETWORK); absent: not checked. */
  readonly pairNetwork?: PairNetworkGuard | 'engine-bridge';
  /** What Podman needs of this host (its init, CDI specs); absent: the Podman checks report them unknown. */
  readonly podmanHost?: PodmanHost;
  /** How bind sources reach the engine (docs/spec.md 5.3), probed with a bind of a folder of ours; absent: not reported. */
  readonly mountMode?: () => Promise<MountMode>;
}

/** CDI spec folders Podman reads (fixed in Podman 4). */
export const CDI_SPEC_DIRS: readonly string[] = ['/etc/cdi', '/var/run/cdi'];

export interface PodmanHost {
  /** `init_path` of containers.conf (the user's, then /etc/containers, then /usr/share/containers), null when none says. */
  readonly initPath: () => Promise<string | null>;
  /** CDI spec files (.json, .yaml) in CDI_SPEC_DIRS. */
  readonly cdiSpecs: () => Promise<readonly string[]>;
}
