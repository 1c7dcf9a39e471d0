import type { ProcessIdentity } from './process-identity.js';

/** The supervisor's identity file in a batch output directory (SPEC §4), written when it starts. */
export const SUPERVISOR_FILE = 'supervisor.json';
/** The supervisor's own log (stdout and stderr of the detached process), next to it. */
export const SUPERVISOR_LOG = 'supervisor.log';

export interface SupervisorRecord extends ProcessIdentity {
  readonly started_at: string;
  readonly mode: 'start' | 'resume';
}
