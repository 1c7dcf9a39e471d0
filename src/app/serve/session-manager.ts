import { SESSION_FILE } from '../../core/evidence-names.js';
import { randomUUID } from 'node:crypto';
import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import { ApiError } from './api-error.js';
import type { CallerEnvironment } from './caller-secrets.js';
import type {
  CleanupRecord,
  ExecRequest,
  ExecResult,
  SessionCreate,
  SessionDetail,
  SessionInfo,
} from './schemas.js';
import type { ContainerDefaults, PublishedPort } from '../ports/container-runtime.js';
import type { ExecObserver } from './session-exec.js';
import { execInSession } from './session-exec-request.js';
import { admissionRefusal, checkCreate, startContainer, type Bind } from './session-create.js';
import {
  abandonCreate,
  performDeletion,
  recordedCleanup,
  shutdownCleanup,
  type ShutdownCleanup,
} from './session-teardown.js';
import {
  newSessionRecord,
  SESSION_ID,
  listedSessions,
  sessionInfo,
  sessionOf,
  sessionRel,
  type Session,
  type SessionManagerDeps,
} from './session-state.js';
import { acquire, type ActiveTransfers } from './session-limits.js';
import { adoptSessions, type Adoption } from './session-restart.js';

export {
  DEFAULT_CONCURRENCY_LIMITS,
  SESSION_SCHEMA,
  type ConcurrencyLimits,
  type SessionManagerDeps,
  type SessionRecord,
} from './session-state.js';
export type { ForeignContainer } from './session-adopt.js';
export type { Adoption } from './session-restart.js';
export type { ShutdownCleanup } from './session-teardown.js';

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
  /** Execs and archive transfers running now, all sessions together. */
  readonly #active: ActiveTransfers = { exec: 0, archive: 0 };
  /** Each container's working directory and default user, asked of the engine once (they never change). */
  readonly #defaults = new Map<string, Promise<ContainerDefaults>>();

  constructor(deps: SessionManagerDeps) {
    this.#deps = deps;
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
    const { session, markReady } = await this.#admit(body, resolved, binds);
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
    this.#deps.logger.info({ session: sessionId, container: created.id }, 'session created');
    return { session_id: sessionId, container_id: created.id, ports: created.ports };
  }

  /** A registry slot, then the session in memory (state `creating`): reserved before the engine is asked, so two creates racing for one port cannot both pass. */
  async #admit(
    body: SessionCreate,
    resolved: CallerEnvironment,
    binds: readonly Bind[],
  ): Promise<{ session: Session; markReady: () => void }> {
    const sessionId = `s-${randomUUID()}`;
    const claimId = randomUUID();
    const admitted = await this.#deps.registry.admit({
      batchId: this.#deps.batchId,
      jobId: sessionId,
      claimId,
      gpuMib: 0,
      writableMounts: binds.filter((b) => !b.readOnly).map((b) => b.hostPath),
      readOnlyMounts: binds.filter((b) => b.readOnly).map((b) => b.hostPath),
    });
    if (admitted.kind === 'refused') throw admissionRefusal(binds, admitted);
    const now = this.#nowMs();
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
    this.#sessions.set(sessionId, session); // with its `ready` already pending: a deletion (SIGTERM) waits for it
    return { session, markReady };
  }

  /** A live session; every request renews its TTL. 404 for unknown or deleted, 409 while it is being deleted. */
  #live(sessionId: string): Session {
    const session = this.#sessions.get(sessionId);
    if (session === undefined || session.state === 'deleted' || session.state === 'creating')
      throw ApiError.notFound(`session ${sessionId}`);
    if (session.state === 'deleting' || session.state === 'releasing')
      throw new ApiError(409, 'E_SESSION_DELETING', `session ${sessionId} is being deleted`);
    this.#touch(session);
    return session;
  }

  #touch(session: Session): void {
    session.expiresAtMs = this.#nowMs() + session.record.ttl_seconds * 1000;
    if (session.expiresAtMs - session.persistedExpiresAtMs > EXPIRY_PERSIST_SLACK_MS)
      void this.#persistExpiry(session);
  }

  async #persistExpiry(session: Session): Promise<void> {
    const expiresAtMs = session.expiresAtMs;
    session.persistedExpiresAtMs = expiresAtMs;
    session.record = { ...session.record, expires_at: new Date(expiresAtMs).toISOString() };
    try {
      await this.#deps.store.writeJsonAtomic(
        sessionRel(session.record.session_id, SESSION_FILE),
        session.record,
      );
    } catch (err) {
      this.#deps.logger.warn(
        { session: session.record.session_id, error: (err as Error).message },
        'cannot persist session expiry',
      );
    }
  }

  async keepalive(sessionId: string): Promise<{ session_id: string; expires_at: string }> {
    const session = this.#live(sessionId);
    await this.#persistExpiry(session);
    return { session_id: sessionId, expires_at: session.record.expires_at };
  }

  list(): SessionInfo[] {
    return listedSessions(this.#sessions.values());
  }

  /** Every secret of every session in memory: what the server's own log masks. */
  allSecrets(): string[] {
    const all = new Set<string>();
    for (const session of this.#sessions.values()) for (const secret of session.secrets) all.add(secret);
    return [...all];
  }

  /** GET /v1/sessions/{id}: the list's fields, and the container's working directory, user and address now. */
  async detail(sessionId: string): Promise<SessionDetail> {
    const session = this.#live(sessionId);
    const detail = await this.#deps.engine.detail(session.record.container_id ?? '');
    return {
      ...sessionInfo(session as Session & { state: 'live' }),
      workdir: session.record.workdir ?? detail?.workdir ?? null,
      user: session.record.user ?? (detail === null || detail.user === '' ? null : detail.user),
      network: session.record.network,
      ip_address: session.record.network === 'none' ? null : (detail?.ipAddress ?? null),
      ports: session.ports,
    };
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
  async exec(
    sessionId: string,
    body: ExecRequest,
    options: { observer?: ExecObserver; signal?: AbortSignal; stdin?: Readable } = {},
  ): Promise<ExecResult> {
    const session = this.#live(sessionId);
    const containerId = session.record.container_id ?? '';
    const cwd = body.cwd === undefined ? undefined : await this.resolvePath(containerId, body.cwd);
    return execInSession(this.#deps, session, body, options, {
      cwd,
      acquire: () => acquire(this.#deps.limits, this.#active, session, 'exec'),
      touch: () => this.#touch(session),
    });
  }

  /** The container a live session runs in (for archives), renewing its TTL. */
  containerOf(sessionId: string): string {
    return this.#live(sessionId).record.container_id ?? '';
  }

  /** The container's working directory and default user (asked of the engine once per container). */
  #defaultsOf(containerId: string): Promise<ContainerDefaults> {
    let known = this.#defaults.get(containerId);
    if (known === undefined) {
      known = this.#deps.engine.containerDefaults(containerId).then((d) => d ?? { workingDir: '', user: '' });
      known.catch(() => this.#defaults.delete(containerId));
      this.#defaults.set(containerId, known);
    }
    return known;
  }

  /**
   * A path in the container: an absolute one as given (normalized), a relative one against the session's working
   * directory (its workdir, else the image's WorkingDir, else /). `..` never climbs above `/`.
   */
  async resolvePath(containerId: string, path: string): Promise<string> {
    if (path.startsWith('/')) return posix.resolve(path);
    const { workingDir } = await this.#defaultsOf(containerId);
    return posix.resolve(workingDir.startsWith('/') ? workingDir : '/', path);
  }

  /**
   * A file transfer (archive or single file) on a live session, within the concurrency limits: its container, the
   * secrets to redact with, the user it runs as (the one asked for, else the container's default user), the path
   * resolved, and `end()` to call once the transfer is over (429 past the limits).
   */
  async beginArchive(
    sessionId: string,
    request: { path: string; user?: string | undefined },
  ): Promise<{
    containerId: string;
    secrets: readonly string[];
    user: string;
    path: string;
    end: () => void;
  }> {
    const session = this.#live(sessionId);
    const containerId = session.record.container_id ?? '';
    const defaults = await this.#defaultsOf(containerId);
    const path = await this.resolvePath(containerId, request.path);
    const end = acquire(this.#deps.limits, this.#active, session, 'archive');
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
        if (session.state === 'deleted' && containerId !== null) this.#defaults.delete(containerId);
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

  /**
   * One reaper pass: deletes every session whose TTL has passed (no exec in flight) and retries the slot release of
   * sessions left `releasing`. Returns the ids deleted now; a failure is logged, never thrown.
   */
  async reap(): Promise<string[]> {
    const now = this.#nowMs();
    const due = [...this.#sessions.values()].filter(
      (s) =>
        s.deletion === null &&
        ((s.state === 'live' && s.expiresAtMs <= now && s.execs.size === 0) || s.state === 'releasing'),
    );
    const outcomes = await Promise.allSettled(due.map((s) => this.delete(s.record.session_id, 'expired')));
    const done: string[] = [];
    outcomes.forEach((outcome, index) => {
      const id = due[index]!.record.session_id;
      if (outcome.status === 'fulfilled' && outcome.value.verified_absent) done.push(id);
      else if (outcome.status === 'rejected')
        this.#deps.logger.warn(
          { session: id, error: (outcome.reason as Error).message },
          'reaper: deletion not finished; the next pass retries',
        );
    });
    return done;
  }

  /**
   * SIGTERM: delete every session (verified) before the server exits. What cannot be finished (a slot the registry
   * could not release) is in that session's cleanup.json (`slot_released: false`) and returned; the next start
   * releases it.
   */
  async deleteAll(): Promise<ShutdownCleanup> {
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
}
