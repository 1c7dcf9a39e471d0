import { SESSION_FILE } from '../../core/evidence-names.js';
import { effectiveEgress, egressInputOf, type EgressInput } from '../../core/egress/policy.js';
import { SessionEgress } from './session-egress.js';
import { addSessionSecrets } from './session-secrets.js';
import { sessionRel, type Session, type SessionManagerDeps } from './session-state.js';

/** A session's policy now: its egress's, else its record's (`network` for a record older than `egress`). */
export function sessionEgressOf(session: Session): EgressInput {
  return (
    session.egress?.input ?? egressInputOf(effectiveEgress(session.record.network, session.record.egress))
  );
}

/**
 * PUT /v1/sessions/{id}/egress: the switch (an adopted session gets its SessionEgress here), then session.json says
 * the policy now. Resolves once the new policy holds for every new connection.
 */
export async function setSessionEgress(
  deps: Pick<SessionManagerDeps, 'engine' | 'egress' | 'store' | 'clock'>,
  session: Session,
  input: EgressInput,
): Promise<EgressInput> {
  if (session.egress === undefined) {
    const policy = effectiveEgress(session.record.network, session.record.egress);
    session.egress = new SessionEgress(deps.egress, policy, (token) =>
      addSessionSecrets(session, [token], deps.clock),
    );
  }
  const egress = session.egress;
  try {
    await egress.set(deps.engine, session.record.container_id ?? '', input);
  } finally {
    // Written whatever happened: a failed switch leaves mode "none", and session.json says so.
    session.record = {
      ...session.record,
      network: egress.policy.mode === 'none' ? 'none' : 'bridge',
      egress: egress.input,
    };
    await deps.store.writeJsonAtomic(sessionRel(session.record.session_id, SESSION_FILE), session.record);
  }
  return egress.input;
}
