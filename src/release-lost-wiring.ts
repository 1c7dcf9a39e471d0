import { lstat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { procHostIdentity } from './adapters/host-identity.js';
import { NodeFileSystem } from './adapters/fs/node-file-system.js';
import {
  defaultRegistryPath,
  isPostgresLocation,
  registryFilePath,
  registryLocation,
} from './adapters/registry/default-path.js';
import { checkRegistryLocation, openRegistryAt } from './adapters/registry/open-registry.js';
import { EvidenceStore } from './app/evidence/evidence-store.js';
import { systemClock } from './adapters/system-clock.js';
import type { ReleaseLostDeps } from './app/release-lost-slot.js';
import { createContainerRuntime } from './composition-root.js';
import { RoboguideError } from './core/errors.js';
import { makeDirs } from './adapters/fs/make-dirs.js';

/** Where `capacity release --evidence-lost` keeps its proofs: beside a SQLite registry, else in the state folder. */
export const LOST_EVIDENCE_DIR = 'lost-evidence';

/**
 * `capacity release --evidence-lost`: the registry of `--registry` (never created: a missing file holds nothing), the
 * local engine, this host's process identities, and the proofs folder.
 */
export async function createReleaseLostWiring(
  registryFlag: string | undefined,
): Promise<{ readonly deps: ReleaseLostDeps; readonly registryPath: string; dispose(): Promise<void> }> {
  const location = registryLocation(registryFlag);
  const file = registryFilePath(location);
  if (file !== undefined && (await lstat(file).catch(() => null)) === null)
    throw new RoboguideError('E_USAGE', `no registry at ${file}: nothing is held there`, {
      exitCode: 2,
      suggestions: ['pass --registry with the database the pair was admitted in'],
    });
  checkRegistryLocation(location);
  const registry = await openRegistryAt(location);
  const proofsDir = join(
    dirname(file !== undefined && !isPostgresLocation(location) ? file : defaultRegistryPath()),
    LOST_EVIDENCE_DIR,
  );
  return {
    registryPath: location.path,
    deps: {
      registry,
      runtime: createContainerRuntime(),
      host: procHostIdentity,
      clock: systemClock,
      exists: async (path) => (await lstat(path).catch(() => null)) !== null,
      proofs: new EvidenceStore(new NodeFileSystem(), proofsDir),
      proofsDir,
      ensureProofsDir: async () => {
        await makeDirs(proofsDir, 0o700);
      },
    },
    dispose: () => registry.close(),
  };
}
