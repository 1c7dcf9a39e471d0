import type { ProcessIdentity } from './process-identity.js';
import { isObject } from './json-object.js';

/** supervisor.json (the identity below, written when it starts) and supervisor.log (its stdout and stderr). */

export interface SupervisorRecord extends ProcessIdentity {
  readonly started_at: string;
  readonly mode: 'start' | 'resume';
}

/** The check `supervisor.json` is read back through. */
export function isSupervisorRecord(value: unknown): value is SupervisorRecord {
  return (
    isObject(value) &&
    typeof value['pid'] === 'number' &&
    typeof value['started_at'] === 'string' &&
    (value['mode'] === 'start' || value['mode'] === 'resume')
  );
}
