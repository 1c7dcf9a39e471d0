import type { Readable } from 'node:stream';
import { ApiError } from './api-error.js';
import type { CleanupRecord, SessionCreate, SessionDetail, SessionInfo } from './session-schemas.js';
import type { ExecRequest, ExecResult } from './exec-schemas.js';
import type { ContainerEndEvent, PublishedPort } from '../ports/container-runtime.js';
import { ContainerDefaultsCache } from './container-defaults.js';
import { admitSession } from './session-admit.js';
import type { ExecObserver } from './session-exec.js';
import { execInSession } from './session-exec-request.js';
import { checkCreate, startContainer } from './session-create.js';
import {
  abandonCreate,
  performDeletion,
  recordedCleanup,
  shutdownCleanup,
  type ShutdownCleanup,
} from './session-teardown.js';
import {
  SESSION_ID,
  listedSessions,
  sessionInfo,
  type Session,
  type SessionManagerDeps,
} from './session-state.js';
import { acquire, type ActiveTransfers } from './session-limits.js';
import { adoptSessions, type Adoption } from './session-restart.js';
import { sessionEgressOf, setSessionEgress } from './session-egress-switch.js';
import type { EgressInput } from '../../core/egress/policy.js';
import { reapPass } from './session-deletion.js';
import { holdSessionSecrets, releaseSessionSecrets } from './session-secrets.js';
import { persistExpiry, restoreExpiry, touchSession } from './session-expiry.js';
import {
  containerEndOf,
  EndedSessions,
  endedError,
  endSession,
  execCutByEnd,
  sessionEndOf,
  stoppingError,
} from './session-life.js';

/**
 * Sessions of `roboguide-eval serve`: a container that idles while a harness runs commands in it, with the
 * pair rules (resolved references never written, labels, init, no-new-privileges, network none by default,
 * the mount rules, a host registry slot), a TTL renewed by every request, and a deletion that is verified by
 * the engine's 404 and releases the slot exactly once.
 */
export class SessionManager {
  readonly #deps: SessionManagerDeps;
  readonly #sessions = new Map<string, Session>();
  /** Execs and archive transfers running now, all sessions together. */
  readonly #active: ActiveTransfers = { exec: 0, archive: 0 };
  /** Each container's working directory and default user, asked of the engine once (they never change). */
  readonly #defaults: ContainerDefaultsCache;
  /** Sessions ended by their container, after they left #sessions: they answer 410 (bounded). */
  readonly #ended = new EndedSessions();
  /** Aborted (reason `server_stopping`) when the shutdown begins: running execs are killed and say why. */
  readonly #stopping = new AbortController();

  constructor(deps: SessionManagerDeps) {
    this.#deps = deps;
    this.#defaults = new ContainerDefaultsCache(deps.engine);
  }

  #nowMs(): number {
    return this.#deps.clock.now().getTime();
  }

  labelsFor(
    sessionId: string,
    claimId: string,
    user: Readonly<Record<string, string>>,
  ): Record<string, string> {
    return {
      ...user,
      'roboguide.batch': this.#deps.batchId,
      'roboguide.job': sessionId,
      'roboguide.claim': claimId,
      'roboguide.serve': 'session',
    };
  }

  async create(
    body: SessionCreate,
  ): Promise<{ session_id: string; container_id: string; ports: Readonly<Record<string, PublishedPort>> }> {
    const { resolved, binds } = await checkCreate(this.#deps, body, this.#sessions.values());
    const { session, markReady } = await admitSession(this.#deps, body, resolved, binds, this.#nowMs());
    // Its secrets' masking compiled (in steps) and held before the session is in memory, where the server's log masks
    // it (session-secrets.ts); after the admission, so that a create refused for capacity compiles nothing.
    try {
      await holdSessionSecrets(session, this.#deps.clock);
    } catch (err) {
      await abandonCreate(this.#deps, session, err as Error);
      markReady();
      throw err;
    }
    this.#sessions.set(session.record.session_id, session); // `ready` pending: a deletion (SIGTERM) waits for it
    const sessionId = session.record.session_id;
    let created: { id: string; ports: Readonly<Record<string, PublishedPort>> };
    try {
      created = await startContainer(this.#deps, session, {
        body,
        env: resolved.values,
        binds,
        labels: this.labelsFor(sessionId, session.record.claim_id, body.labels),
      });
    } catch (err) {
      this.#sessions.delete(sessionId);
      releaseSessionSecrets(session);
      await abandonCreate(this.#deps, session, err as Error);
      markReady();
      throw err;
    }
    session.record = { ...session.record, container_id: created.id };
    session.ports = created.ports;
    let attachFailure: Error | null = null;
    try {
      // The TTL runs from the moment the session is usable (a slow engine must not eat it). session.json names the
      // container first: a restart adopts only a container that session.json or the reservation names.
      session.expiresAtMs = this.#nowMs() + body.ttl_seconds * 1000;
      await this.#persistExpiry(session);
      await this.#deps.registry.attachContainer(session.record.reservation_id, created.id);
    } catch (err) {
      attachFailure = err instanceof Error ? err : new Error(String(err));
    } finally {
      session.state = 'live';
      markReady();
    }
    if (attachFailure !== null) {
      // The caller gets an error and no session id: delete it now (verified) rather than leave it to its TTL.
      await this.delete(sessionId).catch(() => undefined);
      throw attachFailure;
    }
    if (session.ended !== null) this.#endSession(session); // its container ended while it was being created
    this.#deps.logger.info({ session: sessionId, container: created.id }, 'session created');
    return { session_id: sessionId, container_id: created.id, ports: created.ports };
  }

  /** A live session; else 404 (unknown, deleted), 410 (its container ended), 409 (being deleted), 503 (stopping). */
  #live(sessionId: string): Session {
    if (this.#stopping.signal.aborted) throw stoppingError();
    const session = this.#sessions.get(sessionId);
    const ended = session?.ended ?? this.#ended.get(sessionId);
    if (ended !== undefined && ended !== null) throw endedError(sessionId, ended);
    if (session === undefined || session.state === 'deleted' || session.state === 'creating')
      throw ApiError.notFound(`session ${sessionId}`);
    if (session.state === 'deleting' || session.state === 'releasing')
      throw new ApiError(409, 'E_SESSION_DELETING', `session ${sessionId} is being deleted`);
    return session;
  }

  /**
   * The engine says a session's container exited (`die`) or was removed (`destroy`): the session ends (410 to its
   * clients), its execs are told, and it is deleted (verified) at once, which releases its slot. Events of a
   * container being deleted by us, or of another container, change nothing.
   */
  containerEnded(event: ContainerEndEvent): void {
    const session = this.#sessions.get(event.sessionId);
    if (session === undefined || session.record.container_id !== event.containerId) {
      if (session?.state === 'creating') session.ended ??= sessionEndOf(event, this.#deps.clock.now());
      return;
    }
    const end = sessionEndOf(event, this.#deps.clock.now());
    if (session.ended !== null) {
      // Its `destroy` followed its `die` before our deletion began (ours removes it too: that one changes nothing).
      if (end.reason === 'gone' && session.deletion === null) session.ended = end;
      return;
    }
    if (session.deletion !== null) return;
    // Its container is known but the session is not live yet (the registry attach is awaited): create ends it once
    // it is live, so the event is kept, never dropped.
    if (session.state === 'creating') {
      session.ended = end;
      return;
    }
    if (session.state !== 'live') return;
    session.ended = end;
    this.#endSession(session);
  }

  #endSession(session: Session): void {
    endSession(this.#deps, session, (id, reason) => this.delete(id, reason));
  }

  /** After an engine failure on a session's container: when the container is gone or stopped, the session ends (410). */
  async #checkContainer(session: Session, failure: unknown): Promise<never> {
    const end = await containerEndOf(this.#deps.engine, session);
    if (end !== null) this.containerEnded(end);
    if (session.ended !== null) throw endedError(session.record.session_id, session.ended);
    throw failure;
  }

  /** Renews the TTL: only a request that succeeded does (a client retrying a dead session does not keep it). */
  #touch(session: Session): void {
    touchSession(this.#deps, session, this.#nowMs());
  }

  #persistExpiry(session: Session): Promise<void> {
    return persistExpiry(this.#deps, session);
  }

  async keepalive(sessionId: string): Promise<{ session_id: string; expires_at: string }> {
    const session = this.#live(sessionId);
    this.#touch(session);
    await this.#persistExpiry(session);
    return { session_id: sessionId, expires_at: session.record.expires_at };
  }

  list(): SessionInfo[] {
    return listedSessions(this.#sessions.values());
  }

  /** The secrets of every session in memory, a set per session: what the server's own log masks. */
  secretSets(): (readonly string[])[] {
    const sets: (readonly string[])[] = [];
    for (const session of this.#sessions.values()) if (session.secrets.length > 0) sets.push(session.secrets);
    return sets;
  }

  /** GET /v1/sessions/{id}: the list's fields, and the container's working directory, user and address now. */
  async detail(sessionId: string): Promise<SessionDetail> {
    const session = this.#live(sessionId);
    const detail = await this.#deps.engine.detail(session.record.container_id ?? '');
    if (detail === null)
      await this.#checkContainer(session, ApiError.notFound(`the container of session ${sessionId}`));
    this.#touch(session);
    return {
      ...sessionInfo(session as Session & { state: 'live' }),
      workdir: session.record.workdir ?? detail?.workdir ?? null,
      user: session.record.user ?? (detail === null || detail.user === '' ? null : detail.user),
      network: session.record.network,
      ip_address: session.record.network === 'none' ? null : (detail?.ipAddress ?? null),
      ports: session.ports,
      egress: sessionEgressOf(session) as SessionDetail['egress'],
    };
  }

  /** PUT /v1/sessions/{id}/egress (docs/spec.md §5.6): resolves once the new policy holds for new connections. */
  async setEgress(sessionId: string, input: EgressInput): Promise<EgressInput> {
    const session = this.#live(sessionId);
    const now = await setSessionEgress(this.#deps, session, input);
    this.#touch(session);
    return now;
  }

  /** Secrets of a live session (to redact what comes out of it). */
  secretsOf(sessionId: string): { containerId: string; secrets: readonly string[] } {
    const session = this.#live(sessionId);
    return { containerId: session.record.container_id ?? '', secrets: session.secrets };
  }

  /** Run a command; on timeout, or `signal` (the client went away), its process tree is killed (`timed_out`: 124). */
  async exec(
    sessionId: string,
    body: ExecRequest,
    options: { observer?: ExecObserver; signal?: AbortSignal; stdin?: Readable } = {},
  ): Promise<ExecResult> {
    const session = this.#live(sessionId);
    const containerId = session.record.container_id ?? '';
    // Killed and said so when the server stops or the session's container ends; the client's own signal as well.
    const signal = AbortSignal.any([
      ...(options.signal ? [options.signal] : []),
      this.#stopping.signal,
      session.stopExecs.signal,
    ]);
    try {
      const cwd =
        body.cwd === undefined ? undefined : await this.#defaults.resolvePath(containerId, body.cwd);
      return await execInSession(
        this.#deps,
        session,
        body,
        { ...options, signal },
        {
          cwd,
          acquire: () => acquire(this.#deps.limits, this.#active, session, 'exec'),
          touch: () => this.#touch(session),
          cutByEnd: (code) =>
            execCutByEnd(
              this.#deps.engine,
              session,
              code,
              (end) => this.containerEnded(end),
              this.#deps.clock,
            ),
        },
      );
    } catch (err) {
      const status = (err as { context?: { statusCode?: unknown } }).context?.statusCode;
      if (status === 404 || status === 409) return this.#checkContainer(session, err);
      throw err;
    }
  }

  /** The container a live session runs in (for archives). */
  containerOf(sessionId: string): string {
    return this.#live(sessionId).record.container_id ?? '';
  }

  /**
   * A file transfer (archive or single file) on a live session, within the concurrency limits: its container, the
   * secrets to redact with, the user it runs as (the one asked for, else the container's default user), the path
   * resolved, and `end(succeeded)` to call once the transfer is over (429 past the limits). The TTL is renewed as the
   * transfer starts (the reaper does not cut it short, nor wait for a transfer that never ends past one TTL) and
   * taken back when it failed, unless something else renewed it meanwhile: a failing transfer keeps nothing alive.
   */
  async beginArchive(
    sessionId: string,
    request: { path: string; user?: string | undefined },
  ): Promise<{
    containerId: string;
    secrets: readonly string[];
    user: string;
    path: string;
    end: (succeeded?: boolean) => void;
  }> {
    const session = this.#live(sessionId);
    const containerId = session.record.container_id ?? '';
    const defaults = await this.#defaults.of(containerId);
    const path = await this.#defaults.resolvePath(containerId, request.path);
    const release = acquire(this.#deps.limits, this.#active, session, 'archive');
    const before = session.expiresAtMs;
    this.#touch(session);
    const renewed = session.expiresAtMs;
    const end = (succeeded = false): void => {
      release();
      if (!succeeded && session.expiresAtMs === renewed) restoreExpiry(this.#deps, session, before);
    };
    return { containerId, secrets: session.secrets, user: request.user ?? defaults.user, path, end };
  }

  /**
   * Controlled stop, removal verified by the engine's 404, the slot released once. Idempotent: a second call
   * (even after a restart) returns the same cleanup record. Runs to its end whatever happens to the caller.
   * When the registry cannot release the slot (an outage), the removal stands, the session waits in `releasing`,
   * and the call fails (503 with Retry-After when the registry is unreachable): a later DELETE, the reaper, or
   * the next start releases it.
   */
  async delete(sessionId: string, reason: CleanupRecord['reason'] = 'deleted'): Promise<CleanupRecord> {
    const session = this.#sessions.get(sessionId);
    if (session === undefined) {
      if (!SESSION_ID.test(sessionId)) throw ApiError.notFound(`session ${sessionId}`);
      const record = await recordedCleanup(this.#deps, sessionId);
      if (record !== null) return record;
      throw ApiError.notFound(`session ${sessionId}`);
    }
    if (session.deletion === null) {
      session.deletionReason ??= reason;
      const deletion = performDeletion(this.#deps, session, session.deletionReason).then((cleanup) => {
        const containerId = session.record.container_id;
        if (session.state === 'deleted') {
          // Deleted sessions leave the map (a later DELETE reads cleanup.json); ended ones are remembered for 410.
          if (containerId !== null) this.#defaults.forget(containerId);
          if (this.#sessions.get(sessionId) === session) {
            this.#sessions.delete(sessionId);
            releaseSessionSecrets(session);
          }
          if (session.ended !== null) this.#ended.add(sessionId, session.ended);
        }
        return cleanup;
      });
      session.deletion = deletion;
      // A failed attempt is not kept: the next DELETE (or reaper pass) tries again.
      deletion.catch(() => {
        if (session.deletion === deletion) session.deletion = null;
      });
    }
    return session.deletion;
  }

  /** One reaper pass: the expired sessions deleted (none with an exec in flight), `releasing` ones retried; never throws. */
  async reap(): Promise<string[]> {
    return reapPass(this.#sessions.values(), this.#nowMs(), this.#deps.logger, (id) =>
      this.delete(id, 'expired'),
    );
  }

  /**
   * SIGTERM: delete every session (verified) before the server exits. What cannot be finished (a slot the registry
   * could not release) is in that session's cleanup.json (`slot_released: false`) and returned; the next start
   * releases it.
   */
  async deleteAll(): Promise<ShutdownCleanup> {
    this.#stopping.abort('server_stopping'); // running execs are killed first and answer `interrupted`
    const ids = [...this.#sessions.values()]
      .filter((s) => s.state !== 'deleted')
      .map((s) => s.record.session_id);
    const outcomes = await Promise.allSettled(ids.map((id) => this.delete(id, 'shutdown')));
    return shutdownCleanup(ids, outcomes);
  }

  /**
   * After a restart: find this server's sessions by label, session.json and registry row (all three must match;
   * anything else is `foreign`: left alone, logged, reported). Expired ones are deleted with verification; live
   * ones are adopted; a held slot of this server whose session has no container (and no container carries its
   * claim) is released, and a cleanup.json that said the slot was kept is brought up to date.
   */
  async adopt(
    readEnvironment: (containerId: string) => Promise<Record<string, string> | null>,
  ): Promise<Adoption> {
    return adoptSessions(this.#deps, this.#sessions, this.#nowMs(), readEnvironment, (id, reason) =>
      this.delete(id, reason),
    );
  }

  get size(): number {
    return [...this.#sessions.values()].filter((s) => s.state !== 'deleted').length;
  }

  /** Sessions held in memory, deleted or not (bounded: deleted ones leave). */
  get held(): number {
    return this.#sessions.size;
  }
}
