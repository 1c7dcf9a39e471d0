import { randomUUID } from 'node:crypto';
import { redactText } from '../../core/redaction/redact-text.js';
import { resolveEnvironment } from '../../core/manifest/index.js';
import { ApiError } from './api-error.js';
import type { CleanupRecord, ExecRequest, ExecResult, SessionCreate, SessionInfo } from './schemas.js';
import type { PublishedPort } from './session-engine.js';
import { execResult, runExec, type ExecObserver } from './session-exec.js';
import { checkCreate, startContainer } from './session-create.js';
import { releaseSlot, removeVerified } from './session-deletion.js';
import { newSessionRecord, SESSION_ID, sessionInfo, sessionRel, type Session, type SessionManagerDeps } from './session-state.js';
import { adoptedSession } from './session-adopt.js';

export { SESSION_SCHEMA, type SessionManagerDeps, type SessionRecord } from './session-state.js';
export type { ExecObserver } from './session-exec.js';

/** Expiry persisted on disk is refreshed when it lags the in-memory one by more than this. */
const EXPIRY_PERSIST_SLACK_MS = 30_000;

/**
 * Sessions of `roboguide-eval serve`: a container that idles while a harness runs commands in it, with the
 * pair rules (resolved references never written, labels, init, no-new-privileges, network none by default,
 * the mount rules, a host registry slot), a TTL renewed by every request, and a deletion that is verified by
 * the engine's 404 and releases the slot exactly once.
 */
export class SessionManager {
  readonly #deps: SessionManagerDeps;
  readonly #sessions = new Map<string, Session>();

  constructor(deps: SessionManagerDeps) {
    this.#deps = deps;
  }

  #nowMs(): number {
    return this.#deps.clock.now().getTime();
  }

  labelsFor(sessionId: string, claimId: string, user: Readonly<Record<string, string>>): Record<string, string> {
    return { ...user, 'roboguide.batch': this.#deps.batchId, 'roboguide.job': sessionId, 'roboguide.claim': claimId, 'roboguide.serve': 'session' };
  }

  async create(body: SessionCreate): Promise<{ session_id: string; container_id: string; ports: Readonly<Record<string, PublishedPort>> }> {
    const { resolved, binds } = await checkCreate(this.#deps, body, this.#sessions.values());
    const { session, markReady } = await this.#admit(body, resolved.secrets);
    const sessionId = session.record.session_id;
    let created: { id: string; ports: Readonly<Record<string, PublishedPort>> };
    try {
      created = await startContainer(this.#deps, session, { body, env: resolved.values, binds, labels: this.labelsFor(sessionId, session.record.claim_id, body.labels) });
    } catch (err) {
      await this.#abandonCreate(session, err as Error);
      markReady();
      throw err;
    }
    session.record = { ...session.record, container_id: created.id };
    session.ports = created.ports;
    try {
      await this.#deps.registry.attachContainer(session.record.reservation_id, created.id);
      // The TTL runs from the moment the session is usable (a slow engine must not eat it).
      session.expiresAtMs = this.#nowMs() + body.ttl_seconds * 1000;
      await this.#persistExpiry(session);
    } finally {
      session.state = 'live';
      markReady();
    }
    this.#deps.logger.info({ session: sessionId, container: created.id }, 'session created');
    return { session_id: sessionId, container_id: created.id, ports: created.ports };
  }

  /** A registry slot, then the session in memory (state `creating`): reserved before the engine is asked, so two creates racing for one port cannot both pass. */
  async #admit(body: SessionCreate, secrets: readonly string[]): Promise<{ session: Session; markReady: () => void }> {
    const sessionId = `s-${randomUUID()}`;
    const claimId = randomUUID();
    const admitted = await this.#deps.registry.admit({ batchId: this.#deps.batchId, jobId: sessionId, claimId, gpuMib: 0 });
    if (admitted.kind === 'refused') {
      throw new ApiError(409, 'E_CAPACITY', `the host is at its capacity limit (${admitted.held} of ${admitted.limit} held)`);
    }
    const now = this.#nowMs();
    const expiresAtMs = now + body.ttl_seconds * 1000;
    const record = newSessionRecord({ sessionId, claimId, reservationId: admitted.reservationId }, body, now, expiresAtMs);
    const session: Session = {
      record, secrets, ports: {}, expiresAtMs, persistedExpiresAtMs: expiresAtMs,
      state: 'creating', deletion: null, execs: new Set(), ready: Promise.resolve(),
    };
    let markReady = (): void => undefined;
    session.ready = new Promise((resolve) => { markReady = resolve; });
    this.#sessions.set(sessionId, session); // with its `ready` already pending: a deletion (SIGTERM) waits for it
    return { session, markReady };
  }

  /** Nothing runs (the engine adapter removes a container that failed to start): give the slot back, say why. */
  async #abandonCreate(session: Session, err: Error): Promise<void> {
    const deps = this.#deps;
    const { session_id: sessionId, reservation_id: reservationId, claim_id: claimId } = session.record;
    this.#sessions.delete(sessionId);
    await deps.registry.release(reservationId, claimId);
    await deps.store.writeJsonAtomic(sessionRel(sessionId, 'cleanup.json'), {
      session_id: sessionId, container_id: '', reason: 'deleted', stopped: false, removed: false,
      verified_absent: true, slot_released: true, error: `create failed: ${redactText(err.message, session.secrets)}`,
      finished_at: deps.clock.now().toISOString(),
    } satisfies CleanupRecord).catch(() => undefined);
  }

  /** A live session; every request renews its TTL. 404 for unknown or deleted, 409 while it is being deleted. */
  #live(sessionId: string): Session {
    const session = this.#sessions.get(sessionId);
    if (session === undefined || session.state === 'deleted' || session.state === 'creating') throw ApiError.notFound(`session ${sessionId}`);
    if (session.state === 'deleting') throw new ApiError(409, 'E_SESSION_DELETING', `session ${sessionId} is being deleted`);
    this.#touch(session);
    return session;
  }

  #touch(session: Session): void {
    session.expiresAtMs = this.#nowMs() + session.record.ttl_seconds * 1000;
    if (session.expiresAtMs - session.persistedExpiresAtMs > EXPIRY_PERSIST_SLACK_MS) void this.#persistExpiry(session);
  }

  async #persistExpiry(session: Session): Promise<void> {
    const expiresAtMs = session.expiresAtMs;
    session.persistedExpiresAtMs = expiresAtMs;
    session.record = { ...session.record, expires_at: new Date(expiresAtMs).toISOString() };
    try {
      await this.#deps.store.writeJsonAtomic(sessionRel(session.record.session_id, 'session.json'), session.record);
    } catch (err) {
      this.#deps.logger.warn({ session: session.record.session_id, error: (err as Error).message }, 'cannot persist session expiry');
    }
  }

  async keepalive(sessionId: string): Promise<{ session_id: string; expires_at: string }> {
    const session = this.#live(sessionId);
    await this.#persistExpiry(session);
    return { session_id: sessionId, expires_at: session.record.expires_at };
  }

  list(): SessionInfo[] {
    return [...this.#sessions.values()]
      .filter((s): s is Session & { state: 'live' | 'deleting' } => s.state === 'live' || s.state === 'deleting')
      .map(sessionInfo);
  }

  /** Secrets of a live session (to redact what comes out of it), renewing its TTL. */
  secretsOf(sessionId: string): { containerId: string; secrets: readonly string[] } {
    const session = this.#live(sessionId);
    return { containerId: session.record.container_id ?? '', secrets: session.secrets };
  }

  /**
   * Run a command. On timeout the exec's process tree is killed (SIGKILL to its process group) and the result
   * says `timed_out` with return code 124. `signal` aborting (the client went away) kills the tree too.
   */
  async exec(sessionId: string, body: ExecRequest, options: { observer?: ExecObserver; signal?: AbortSignal } = {}): Promise<ExecResult> {
    const session = this.#live(sessionId);
    const deps = this.#deps;
    let secrets = session.secrets;
    let env: Record<string, string> | undefined;
    if (body.env !== undefined) {
      const resolved = resolveEnvironment(body.env, deps.environment, 'env');
      if (!resolved.ok) throw new ApiError(400, 'E_ENV_MISSING', 'the command references unset variables', resolved.issues);
      env = resolved.values;
      secrets = [...secrets, ...resolved.secrets];
    }
    const argv = body.argv ?? ['/bin/sh', '-c', body.command ?? ''];
    const started = process.hrtime.bigint();
    const handle = await deps.engine.exec(session.record.container_id ?? '', {
      argv,
      cwd: body.cwd,
      env,
      user: body.user,
      stdin: body.stdin !== undefined ? Buffer.from(body.stdin, 'utf8') : undefined,
    });
    session.execs.add(handle);
    let outcome;
    try {
      outcome = await runExec({ ...options, handle, secrets, timeoutSec: body.timeout_sec, createRedactor: deps.createRedactor, maxOutputBytes: deps.maxOutputBytes, logger: deps.logger, sessionId });
    } finally {
      session.execs.delete(handle);
      this.#touch(session);
    }
    const result = execResult(outcome, Number(process.hrtime.bigint() - started) / 1e6);
    const line = {
      at: deps.clock.now().toISOString(),
      argv: argv.map((a) => redactText(a, secrets)),
      return_code: result.return_code,
      timed_out: outcome.timedOut,
      client_gone: options.signal?.aborted === true,
      duration_ms: result.duration_ms,
      stdout_bytes: outcome.stdout.bytes,
      stderr_bytes: outcome.stderr.bytes,
    };
    await deps.fs.appendFile(deps.store.resolve(sessionRel(sessionId, 'execs.jsonl')), new TextEncoder().encode(`${JSON.stringify(line)}\n`), 0o600).catch(() => undefined);
    return result;
  }

  /** The container a live session runs in (for archives), renewing its TTL. */
  containerOf(sessionId: string): string {
    return this.#live(sessionId).record.container_id ?? '';
  }

  /**
   * Controlled stop, removal verified by the engine's 404, the slot released once. Idempotent: a second call
   * (even after a restart) returns the same cleanup record. Runs to its end whatever happens to the caller.
   */
  async delete(sessionId: string, reason: CleanupRecord['reason'] = 'deleted'): Promise<CleanupRecord> {
    const session = this.#sessions.get(sessionId);
    if (session === undefined) {
      if (!SESSION_ID.test(sessionId)) throw ApiError.notFound(`session ${sessionId}`);
      const record = await this.#deps.store.readJson<CleanupRecord>(sessionRel(sessionId, 'cleanup.json')).catch(() => null);
      if (record !== null) return record;
      throw ApiError.notFound(`session ${sessionId}`);
    }
    session.deletion ??= this.#performDeletion(session, reason);
    return session.deletion;
  }

  async #performDeletion(session: Session, reason: CleanupRecord['reason']): Promise<CleanupRecord> {
    const deps = this.#deps;
    await session.ready; // a session still being created is deleted once its container exists
    const { record } = session;
    session.state = 'deleting';
    const containerId = record.container_id;
    const removal = await removeVerified(deps.engine, containerId, deps.stopBudgetSec);
    const slot = removal.verified ? await releaseSlot(deps.registry, record) : { released: false, error: null };
    const error = slot.error ?? removal.error;
    const cleanup: CleanupRecord = {
      session_id: record.session_id,
      container_id: containerId ?? '',
      reason,
      stopped: removal.stopped,
      removed: removal.removed,
      verified_absent: removal.verified,
      slot_released: slot.released,
      error: error === null ? null : redactText(error, session.secrets),
      finished_at: deps.clock.now().toISOString(),
    };
    if (!removal.verified) {
      // Not proven gone: keep the slot and let a later DELETE (or the reaper) try again.
      session.state = 'live';
      session.deletion = null;
      deps.logger.error({ session: record.session_id, container: containerId }, 'session removal unverified; slot kept');
      return cleanup;
    }
    await deps.store.writeJsonAtomic(sessionRel(record.session_id, 'cleanup.json'), cleanup).catch((err: unknown) => {
      deps.logger.error({ session: record.session_id, error: (err as Error).message }, 'cannot write cleanup.json');
    });
    session.state = 'deleted';
    deps.logger.info({ session: record.session_id, container: containerId, reason }, 'session deleted');
    return cleanup;
  }

  /** Delete every session whose TTL has passed; returns their ids. */
  async reap(): Promise<string[]> {
    const now = this.#nowMs();
    const expired = [...this.#sessions.values()].filter((s) => s.state === 'live' && s.expiresAtMs <= now && s.execs.size === 0);
    await Promise.all(expired.map((s) => this.delete(s.record.session_id, 'expired')));
    return expired.map((s) => s.record.session_id);
  }

  /** SIGTERM: delete every session (verified) before the server exits. */
  async deleteAll(): Promise<CleanupRecord[]> {
    const ids = [...this.#sessions.values()].filter((s) => s.state !== 'deleted').map((s) => s.record.session_id);
    return Promise.all(ids.map((id) => this.delete(id, 'shutdown')));
  }

  /**
   * After a restart: find this server's sessions by label and registry row. Expired (or unknown) ones are
   * deleted with verification; live ones are adopted; a held slot whose session has no container is released.
   */
  async adopt(readEnvironment: (containerId: string) => Promise<Record<string, string> | null>): Promise<{ adopted: string[]; reaped: string[]; released: string[] }> {
    const deps = this.#deps;
    const adopted: string[] = [];
    const reaped: string[] = [];
    const released: string[] = [];
    const containers = await deps.engine.listByLabel({ 'roboguide.batch': deps.batchId });
    const now = this.#nowMs();
    for (const container of containers) {
      const { sessionId, session, live } = await adoptedSession(deps, container, now, readEnvironment);
      this.#sessions.set(sessionId, session);
      if (!live) {
        await this.delete(sessionId, 'adopted_expired');
        reaped.push(sessionId);
      } else {
        adopted.push(sessionId);
      }
    }
    for (const reservation of await deps.registry.held({ batchId: deps.batchId })) {
      if (this.#sessions.has(reservation.jobId)) continue;
      // No container carries this claim: nothing runs, the slot goes back.
      await deps.registry.release(reservation.id, reservation.claimId);
      released.push(reservation.jobId);
    }
    return { adopted, reaped, released };
  }

  get size(): number {
    return [...this.#sessions.values()].filter((s) => s.state !== 'deleted').length;
  }
}
