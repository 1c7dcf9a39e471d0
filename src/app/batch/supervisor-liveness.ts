import { isSupervisorRecord, type SupervisorRecord } from '../../core/supervisor-record.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { HostIdentity } from '../ports/host-identity.js';
import { SUPERVISOR_FILE } from '../../core/evidence-names.js';

/**
 * The batch's recorded supervisor, if it is still supervising: the same live process (pid, start time, boot id)
 * and no `supervisor_exited` journalled since it started (a foreground supervisor returns, its process lives on).
 * `records`: the journal as the caller has just read it (else it is read here, whole).
 */
export async function runningSupervisor(
  store: EvidenceStore,
  host: Pick<HostIdentity, 'isAlive'>,
  records?: readonly { readonly type: string }[],
): Promise<SupervisorRecord | null> {
  const supervisor = await store.readJson(SUPERVISOR_FILE, isSupervisorRecord);
  if (supervisor === null || !host.isAlive(supervisor)) return null;
  const journal = records ?? (await store.readJournal());
  for (let i = journal.length - 1; i >= 0; i--) {
    const type = journal[i]?.type;
    if (type === 'supervisor_exited') return null;
    if (type === 'supervisor_started') return supervisor;
  }
  return supervisor;
}
