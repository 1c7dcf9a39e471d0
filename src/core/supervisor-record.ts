import type { ProcessIdentity } from './process-identity.js';

/** supervisor.json (the identity below, written when it starts) and supervisor.log (its stdout and stderr). */
export { SUPERVISOR_FILE, SUPERVISOR_LOG } from './evidence-names.js';

export interface SupervisorRecord extends ProcessIdentity {
  readonly started_at: string;
  readonly mode: 'start' | 'resume';
}
