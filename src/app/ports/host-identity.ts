import type { ProcessIdentity } from '../../core/process-identity.js';

/**
 * The host's view of processes (SPEC §4): who this process is, the boot id now, and whether a recorded process is
 * still the same live one. Adapter: `/proc` (src/adapters/host-identity.ts); tests use a fake.
 */
export interface HostIdentity {
  /** This process: its pid, start time and the boot id. */
  current(): Promise<ProcessIdentity>;
  /** The host's boot id now; null when it cannot be read. */
  bootId(): Promise<string | null>;
  /**
   * Is the recorded process still the same live process (same boot, pid and start time, not a zombie)?
   * Synchronous: it is also asked inside a registry transaction.
   */
  isAlive(identity: ProcessIdentity): boolean;
}
