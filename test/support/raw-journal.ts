import type { JournalEvent } from '../../src/core/journal-events.js';

/**
 * A journal record of any shape, an older writer's or a malformed one included, for the tests of the store's and the
 * readers' mechanics, which take whatever the file holds. The union is the type checker's rule for the batch code
 * that writes records, not for these tests: this is the one deliberate cast past it.
 */
export const rawJournalRecord = (event: {
  readonly type: string;
  readonly at: string;
  readonly [field: string]: unknown;
}): JournalEvent => event as unknown as JournalEvent;
