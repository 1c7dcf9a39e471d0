import { randomUUID } from 'node:crypto';
import type { CallerEnvironment } from './caller-secrets.js';
import type { SessionCreate } from './session-schemas.js';
import { admissionRefusal, type Bind } from './session-create.js';
import { newSessionRecord, sessionOf, type Session, type SessionManagerDeps } from './session-state.js';

/**
 * A registry slot, then the session (state `creating`, `ready` pending until `markReady`): reserved before the engine
 * is asked, so two creates racing for one port cannot both pass.
 */
export async function admitSession(
  deps: Pick<SessionManagerDeps, 'registry' | 'batchId'>,
  body: SessionCreate,
  resolved: CallerEnvironment,
  binds: readonly Bind[],
  now: number,
): Promise<{ session: Session; markReady: () => void }> {
  const sessionId = `s-${randomUUID()}`;
  const claimId = randomUUID();
  const admitted = await deps.registry.admit({
    batchId: deps.batchId,
    jobId: sessionId,
    claimId,
    gpuMib: 0,
    writableMounts: binds.filter((b) => !b.readOnly).map((b) => b.hostPath),
    readOnlyMounts: binds.filter((b) => b.readOnly).map((b) => b.hostPath),
  });
  if (admitted.kind === 'refused') throw admissionRefusal(binds, admitted);
  const expiresAtMs = now + body.ttl_seconds * 1000;
  const record = newSessionRecord(
    { sessionId, claimId, reservationId: admitted.reservationId },
    body,
    now,
    expiresAtMs,
    resolved.stored,
  );
  const session = sessionOf({ record, secrets: resolved.secrets, expiresAtMs, state: 'creating' });
  let markReady = (): void => undefined;
  session.ready = new Promise((resolve) => {
    markReady = resolve;
  });
  return { session, markReady };
}
