import { jobImage } from '../../core/manifest/parse.js';
import type { SupervisorState } from '../../core/supervisor-machine.js';
import { ImagePuller } from './image-puller.js';
import {
  NO_CREDENTIALS,
  noDockerConfig,
  registryCredentials,
  type RegistryCredentials,
} from './registry-auth.js';
import type { SupervisorDeps } from './supervisor-deps.js';
import type { BatchRecord } from './layout.js';
import type { Manifest } from '../../core/manifest/schema.js';
import type { JournalAppend } from '../../core/journal-events.js';

/**
 * Issue 43: the supervisor's image puller, when the batch has an image plan and the engine has image calls. The
 * queue is the manifest's order of the pairs the machine has not dispatched yet; credentials are resolved from this
 * supervisor's environment (each resume resolves them again; nothing of them is written).
 */
export async function credentialsFor(
  deps: SupervisorDeps,
  batch: BatchRecord,
  manifest: Manifest,
): Promise<RegistryCredentials> {
  if (batch.image_plan === undefined || manifest.registries === undefined) return NO_CREDENTIALS;
  return registryCredentials(manifest, deps.environment, deps.readDockerConfig ?? noDockerConfig, {
    allowShortSecrets: batch.allow_short_secrets === true,
  });
}

export function imagePullerFor(input: {
  readonly deps: SupervisorDeps;
  readonly batch: BatchRecord;
  readonly manifest: Manifest;
  readonly journal: JournalAppend;
  readonly credentials: RegistryCredentials;
  readonly redact: (text: string) => string;
  readonly state: () => SupervisorState | undefined;
  readonly onChange: () => void;
}): ImagePuller | undefined {
  const { deps, batch, manifest } = input;
  const plan = batch.image_plan;
  if (plan === undefined || deps.imagePulls === undefined) return undefined;
  const order = manifest.jobs.map((j) => [j.job_id, jobImage(manifest, j)] as const);
  return new ImagePuller({
    pulls: deps.imagePulls,
    plan,
    credentials: input.credentials,
    journal: input.journal,
    logger: deps.logger,
    clock: deps.execute.clock,
    redact: input.redact,
    queue: () => {
      const claimed = input.state()?.claimed;
      return order.filter(([id]) => claimed === undefined || !claimed.has(id)).map(([, image]) => image);
    },
    onChange: input.onChange,
    halted: () => {
      const state = input.state();
      return state !== undefined && (state.stop !== 'none' || state.pauseReasons.length > 0);
    },
    ...(batch.images !== undefined ? { ownImages: batch.images } : {}),
  });
}
