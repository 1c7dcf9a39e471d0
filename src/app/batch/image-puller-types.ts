import type { JournalAppend } from '../../core/journal-events.js';
import type { ImagePlanRecord } from '../../core/image-plan.js';
import type { Clock } from '../ports/clock.js';
import type { ImagePulls } from '../ports/image-pulls.js';
import type { Logger } from '../ports/logger.js';
import type { RegistryCredentials } from './registry-auth.js';

/** What the image puller (`image-puller.ts`, issue 43) is given: one engine's pulls, the plan, and the batch's parts. */
export interface ImagePullerDeps {
  readonly pulls: ImagePulls;
  readonly plan: ImagePlanRecord;
  readonly credentials: RegistryCredentials;
  readonly journal: JournalAppend;
  readonly logger: Logger;
  readonly clock: Clock;
  readonly redact: (text: string) => string;
  /** The images (as the manifest names them) of the pairs not dispatched yet, in dispatch order. */
  readonly queue: () => readonly string[];
  /** Something status shows changed (a pull started, ended, an image went). */
  readonly onChange?: () => void;
  /** The batch stops or pauses: a pair waiting for its image is given back unclaimed. */
  readonly halted?: () => boolean;
  /** The images the engine had before the batch, by id (batch.json `images`): removed only with prune_own_images. */
  readonly ownImages?: Readonly<Record<string, string>>;
  readonly backoffMs?: number;
  readonly attempts?: number;
  /** Swarm: the node whose engine this puller pulls on (named in every journal record). */
  readonly node?: string;
}

/** How a pair waits for its image: `signal` ends the wait (`stopped`); `quiet`: the caller counts and journals the wait. */
export interface ReadyOptions {
  readonly signal?: AbortSignal;
  readonly quiet?: boolean;
}
