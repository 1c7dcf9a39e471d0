import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { ExecutePairDeps } from '../pair/execute-pair-types.js';
import type { CapacityRegistry } from '../ports/capacity-registry.js';
import type { ImagePulls } from '../ports/image-pulls.js';
import type { Logger } from '../ports/logger.js';
import type { DockerConfigReader } from './registry-auth.js';

/** What the batch supervisor (`supervise`, src/app/batch/supervisor.ts) is given; src/composition-root.ts wires it. */
export interface SupervisorDeps {
  readonly store: EvidenceStore;
  readonly registry: CapacityRegistry;
  readonly execute: ExecutePairDeps;
  readonly logger: Logger;
  readonly environment: Readonly<Record<string, string | undefined>>;
  /** Install signal handlers (SIGTERM/SIGINT: stop, twice: terminate; a third: kill now; SIGUSR2: read the stop request). */
  readonly handleSignals: boolean;
  /** Issue 43: the engine's image calls (a batch with an image plan pulls ahead with them). */
  readonly imagePulls?: ImagePulls;
  /** Issue 43, swarm: the image calls of one node's own engine (`--node-engine`): each node pulls for its pairs. */
  readonly nodeImagePulls?: (node: string) => ImagePulls;
  /** `~/.docker/config.json` for `registries.<host>.docker_config`. */
  readonly readDockerConfig?: DockerConfigReader;
}
