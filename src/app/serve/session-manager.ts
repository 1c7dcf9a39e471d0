import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import type { Readable, Transform } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import { redactText } from '../../core/redaction/redact-text.js';
import { deviceRequestsFor } from '../../core/gpu/device-requests.js';
import { referencedName, resolveEnvironment } from '../../core/manifest/index.js';
import { checkFreeMounts, resolveProtectedPaths, type ProtectedPaths } from '../../core/mount-policy.js';
import type { Clock } from '../ports/clock.js';
import type { CapacityRegistry } from '../ports/capacity-registry.js';
import type { Logger } from '../ports/logger.js';
import { ApiError } from './api-error.js';
import type { CleanupRecord, ExecRequest, ExecResult, SessionCreate, SessionInfo } from './schemas.js';
import type { ExecHandle, PublishedPort, SessionEngine } from './session-engine.js';
import type { FileSystem } from '../ports/file-system.js';

export const SESSION_SCHEMA = 'roboguide.serve.session/v1' as const;
const TIMEOUT_RETURN_CODE = 124;
/** After a timeout kill, how long the output may take to end before the connection is abandoned. */
const KILL_GRACE_MS = 2_000;
/** Expiry persisted on disk is refreshed when it lags the in-memory one by more than this. */
const EXPIRY_PERSIST_SLACK_MS = 30_000;
const VERIFY_ATTEMPTS = 20;
const VERIFY_PAUSE_MS = 100;
const SESSION_ID = /^s-[0-9a-f-]{36}$/;

/** session.json: what a restarted server needs to adopt or reap the session. No resolved value is written. */
export interface SessionRecord {
  readonly schema: typeof SESSION_SCHEMA;
  readonly session_id: string;
  readonly claim_id: string;
  readonly reservation_id: string;
  readonly container_id: string | null;
  readonly container_name: string;
  readonly image: string;
  /** As requested: `${NAME}` references, never their values. */
  readonly environment: Readonly<Record<string, string>>;
  readonly ports: readonly number[];
  readonly network: 'none' | 'bridge';
  readonly labels: Readonly<Record<string, string>>;
  readonly ttl_seconds: number;
  readonly created_at: string;
  readonly expires_at: string;
}

/** `creating` until the engine has started the container: invisible to clients, never reaped, deletion waits. */
type SessionState = 'creating' | 'live' | 'deleting' | 'deleted';

interface Session {
  record: SessionRecord;
  readonly secrets: readonly string[];
  ports: Readonly<Record<string, PublishedPort>>;
  expiresAtMs: number;
  persistedExpiresAtMs: number;
  state: SessionState;
  deletion: Promise<CleanupRecord> | null;
  readonly execs: Set<ExecHandle>;
  /** Settles when creation has finished (either way); a deletion waits for it. */
  ready: Promise<void>;
}

export interface SessionManagerDeps {
  readonly engine: SessionEngine;
  readonly registry: CapacityRegistry;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Real paths of mount sources, and the exec log (`execs.jsonl`). */
  readonly fs: FileSystem;
  /** Evidence root (`--data-dir`): sessions/<id>/ and pairs/<id>/ live under it. */
  readonly store: EvidenceStore;
  /** The registry batch id of this server's sessions (also their `roboguide.batch` label). */
  readonly batchId: string;
  /** Where `${NAME}` references are resolved: the server's own environment. */
  readonly environment: Readonly<Record<string, string | undefined>>;
  readonly bindAddress: string;
  readonly protectedPaths: ProtectedPaths;
  readonly createRedactor: (secrets: readonly string[]) => Transform;
  readonly stopBudgetSec: number;
  /** Per stream, per exec: output beyond this is dropped (the result says `truncated`). */
  readonly maxOutputBytes: number;
}

export interface ExecObserver {
  onOutput(stream: 'stdout' | 'stderr', text: string): void;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

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
    const deps = this.#deps;
    const resolved = resolveEnvironment(body.environment, deps.environment, 'environment');
    if (!resolved.ok) throw new ApiError(400, 'E_ENV_MISSING', 'the session references unset variables', resolved.issues);
    const binds = await this.#checkedMounts(body.mounts);
    for (const port of body.ports) {
      for (const other of this.#sessions.values()) {
        if (other.state !== 'deleted' && other.record.ports.includes(port)) {
          throw new ApiError(409, 'E_PORT_TAKEN', `port ${port} is already published by session ${other.record.session_id}`, [{ path: 'ports', rule: `port ${port} is taken` }]);
        }
      }
    }
    if (!(await deps.engine.imageExists(body.image))) {
      throw new ApiError(400, 'E_IMAGE_MISSING', `image ${body.image} is not present on this engine`, [{ path: 'image', rule: 'is not present on the engine (no pulls)' }]);
    }
    const sessionId = `s-${randomUUID()}`;
    const claimId = randomUUID();
    const admitted = await deps.registry.admit({ batchId: deps.batchId, jobId: sessionId, claimId, gpuMib: 0 });
    if (admitted.kind === 'refused') {
      throw new ApiError(409, 'E_CAPACITY', `the host is at its capacity limit (${admitted.held} of ${admitted.limit} held)`);
    }
    const now = this.#nowMs();
    const expiresAtMs = now + body.ttl_seconds * 1000;
    let record: SessionRecord = {
      schema: SESSION_SCHEMA,
      session_id: sessionId,
      claim_id: claimId,
      reservation_id: admitted.reservationId,
      container_id: null,
      container_name: `roboguide-${sessionId}`,
      image: body.image,
      environment: body.environment,
      ports: body.ports,
      network: body.network,
      labels: body.labels,
      ttl_seconds: body.ttl_seconds,
      created_at: new Date(now).toISOString(),
      expires_at: new Date(expiresAtMs).toISOString(),
    };
    const session: Session = {
      record,
      secrets: resolved.secrets,
      ports: {},
      expiresAtMs,
      persistedExpiresAtMs: expiresAtMs,
      state: 'creating',
      deletion: null,
      execs: new Set(),
      ready: Promise.resolve(),
    };
    // Reserved before the engine is asked, so two creates racing for one port cannot both pass.
    this.#sessions.set(sessionId, session);
    let markReady = (): void => undefined;
    session.ready = new Promise((resolve) => { markReady = resolve; });
    let created: { id: string; ports: Readonly<Record<string, PublishedPort>> };
    try {
      await deps.store.ensureDir(this.#rel(sessionId));
      await deps.store.writeJsonAtomic(this.#rel(sessionId, 'session.json'), record);
      created = await deps.engine.createAndStart({
        name: record.container_name,
        image: body.image,
        env: resolved.values,
        workdir: body.workdir,
        binds,
        ports: body.ports,
        bindAddress: deps.bindAddress,
        network: body.network,
        nanoCpus: body.cpus !== undefined ? Math.round(body.cpus * 1e9) : undefined,
        memoryBytes: body.memory_mb !== undefined ? body.memory_mb * 1024 * 1024 : undefined,
        deviceRequests: deviceRequestsFor(body.gpus),
        labels: this.labelsFor(sessionId, claimId, body.labels),
        stopTimeoutSec: deps.stopBudgetSec,
      });
    } catch (err) {
      // Nothing runs (the engine adapter removes a container that failed to start): give the slot back.
      this.#sessions.delete(sessionId);
      await deps.registry.release(admitted.reservationId, claimId);
      await deps.store.writeJsonAtomic(this.#rel(sessionId, 'cleanup.json'), {
        session_id: sessionId, container_id: '', reason: 'deleted', stopped: false, removed: false,
        verified_absent: true, slot_released: true, error: `create failed: ${redactText((err as Error).message, resolved.secrets)}`,
        finished_at: this.#deps.clock.now().toISOString(),
      } satisfies CleanupRecord).catch(() => undefined);
      markReady();
      throw err;
    }
    record = { ...record, container_id: created.id };
    session.record = record;
    session.ports = created.ports;
    try {
      await deps.registry.attachContainer(admitted.reservationId, created.id);
      // The TTL runs from the moment the session is usable (a slow engine must not eat it).
      session.expiresAtMs = this.#nowMs() + body.ttl_seconds * 1000;
      await this.#persistExpiry(session);
    } finally {
      session.state = 'live';
      markReady();
    }
    deps.logger.info({ session: sessionId, container: created.id }, 'session created');
    return { session_id: sessionId, container_id: created.id, ports: created.ports };
  }

  async #checkedMounts(mounts: SessionCreate['mounts']): Promise<{ hostPath: string; containerPath: string; readOnly: boolean }[]> {
    const binds: { hostPath: string; containerPath: string; readOnly: boolean }[] = [];
    const missing: { path: string; rule: string }[] = [];
    for (const [index, mount] of mounts.entries()) {
      try {
        binds.push({ hostPath: await this.#deps.fs.realpath(mount.source), containerPath: mount.target, readOnly: mount.read_only });
      } catch {
        missing.push({ path: `mounts[${index}].source`, rule: 'does not exist on the server\'s host' });
      }
    }
    if (missing.length > 0) throw ApiError.invalid('the session request', missing);
    // Protected paths as real paths too: a symlinked $HOME (/home/u → /var/home/u) must not let /var/home/u in.
    const protectedPaths = await resolveProtectedPaths(this.#deps.protectedPaths, (path) => this.#deps.fs.realpath(path));
    const issues = checkFreeMounts(binds.map((b, index) => ({ field: `mounts[${index}].source`, hostPath: b.hostPath })), protectedPaths);
    if (issues.length > 0) throw ApiError.invalid('the session request', issues.map((i) => ({ path: i.field, rule: i.message })));
    return binds;
  }

  #rel(sessionId: string, file?: string): string {
    return file === undefined ? join('sessions', sessionId) : join('sessions', sessionId, file);
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
      await this.#deps.store.writeJsonAtomic(this.#rel(session.record.session_id, 'session.json'), session.record);
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
      .map((s) => ({
        session_id: s.record.session_id,
        container_id: s.record.container_id ?? '',
        image: s.record.image,
        state: s.state,
        created_at: s.record.created_at,
        expires_at: new Date(s.expiresAtMs).toISOString(),
        labels: s.record.labels,
      }));
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
    let timedOut = false;
    let killed = false;
    const kill = (): void => {
      if (killed) return;
      killed = true;
      handle
        .killTree()
        .catch((err: unknown) => deps.logger.warn({ session: sessionId, error: (err as Error).message }, 'cannot kill an exec'))
        // Output still open after the kill belongs to a process that left the group: stop reading.
        .finally(() => setTimeout(() => handle.abandon(), KILL_GRACE_MS).unref());
    };
    const timer = body.timeout_sec !== undefined ? setTimeout(() => { timedOut = true; kill(); }, body.timeout_sec * 1000) : undefined;
    const onAbort = (): void => kill();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    let truncated = false;
    const collect = async (source: Readable, name: 'stdout' | 'stderr'): Promise<{ text: string; bytes: number }> => {
      const redactor = deps.createRedactor(secrets);
      source.pipe(redactor);
      const decoder = new StringDecoder('utf8');
      const parts: string[] = [];
      let kept = 0;
      let bytes = 0;
      for await (const chunk of redactor) {
        const buffer = chunk as Buffer;
        bytes += buffer.length;
        const text = decoder.write(buffer);
        if (options.observer) {
          if (text.length > 0) options.observer.onOutput(name, text);
          continue;
        }
        if (kept + buffer.length > deps.maxOutputBytes) {
          truncated = true;
          continue;
        }
        kept += buffer.length;
        parts.push(text);
      }
      const tail = decoder.end();
      if (tail.length > 0) {
        if (options.observer) options.observer.onOutput(name, tail);
        else parts.push(tail);
      }
      return { text: parts.join(''), bytes };
    };
    let outputs: [{ text: string; bytes: number }, { text: string; bytes: number }];
    let code: number | null;
    try {
      outputs = await Promise.all([collect(handle.stdout, 'stdout'), collect(handle.stderr, 'stderr')]);
      code = await handle.done;
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      session.execs.delete(handle);
      this.#touch(session);
    }
    const durationMs = Number(process.hrtime.bigint() - started) / 1e6;
    const result: ExecResult = {
      stdout: outputs[0].text,
      stderr: outputs[1].text,
      return_code: timedOut ? TIMEOUT_RETURN_CODE : (code ?? -1),
      timed_out: timedOut,
      duration_ms: Math.round(durationMs * 1000) / 1000,
      truncated,
    };
    const line = {
      at: deps.clock.now().toISOString(),
      argv: argv.map((a) => redactText(a, secrets)),
      return_code: result.return_code,
      timed_out: timedOut,
      client_gone: options.signal?.aborted === true,
      duration_ms: result.duration_ms,
      stdout_bytes: outputs[0].bytes,
      stderr_bytes: outputs[1].bytes,
    };
    await deps.fs.appendFile(deps.store.resolve(this.#rel(sessionId, 'execs.jsonl')), new TextEncoder().encode(`${JSON.stringify(line)}\n`), 0o600).catch(() => undefined);
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
      const record = await this.#deps.store.readJson<CleanupRecord>(this.#rel(sessionId, 'cleanup.json')).catch(() => null);
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
    let stopped = false;
    let removed = false;
    let verified = containerId === null;
    let error: string | null = null;
    if (containerId !== null) {
      try {
        await deps.engine.stop(containerId, deps.stopBudgetSec);
        stopped = true;
      } catch (err) {
        error = `stop: ${(err as Error).message}`;
      }
      try {
        await deps.engine.remove(containerId);
        removed = true;
      } catch (err) {
        error = `remove: ${(err as Error).message}`;
      }
      for (let attempt = 0; attempt < VERIFY_ATTEMPTS && !verified; attempt++) {
        try {
          verified = (await deps.engine.inspect(containerId)) === null;
        } catch (err) {
          error = `verify: ${(err as Error).message}`;
        }
        if (!verified) {
          await sleep(VERIFY_PAUSE_MS);
          await deps.engine.remove(containerId).catch(() => undefined);
        }
      }
    }
    let slotReleased = false;
    if (verified) {
      const released = await deps.registry.release(record.reservation_id, record.claim_id);
      slotReleased = released.kind === 'released' || released.kind === 'already_released';
      if (!slotReleased) error = `slot: ${released.kind === 'refused' ? released.reason : released.kind}`;
    }
    const cleanup: CleanupRecord = {
      session_id: record.session_id,
      container_id: containerId ?? '',
      reason,
      stopped,
      removed,
      verified_absent: verified,
      slot_released: slotReleased,
      error: error === null ? null : redactText(error, session.secrets),
      finished_at: deps.clock.now().toISOString(),
    };
    if (!verified) {
      // Not proven gone: keep the slot and let a later DELETE (or the reaper) try again.
      session.state = 'live';
      session.deletion = null;
      deps.logger.error({ session: record.session_id, container: containerId }, 'session removal unverified; slot kept');
      return cleanup;
    }
    await deps.store.writeJsonAtomic(this.#rel(record.session_id, 'cleanup.json'), cleanup).catch((err: unknown) => {
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
      const sessionId = container.labels['roboguide.job'] ?? '';
      const claimId = container.labels['roboguide.claim'] ?? '';
      const stored = SESSION_ID.test(sessionId)
        ? await deps.store.readJson<SessionRecord>(this.#rel(sessionId, 'session.json')).catch(() => null)
        : null;
      const reservation = await deps.registry.reservationForClaim(claimId);
      const record: SessionRecord = {
        ...(stored ?? {
          schema: SESSION_SCHEMA, session_id: sessionId, claim_id: claimId, reservation_id: reservation?.id ?? '', container_name: '',
          image: '', environment: {}, ports: [], network: 'none', labels: {}, ttl_seconds: 1, created_at: '', expires_at: new Date(0).toISOString(),
        }),
        container_id: container.id,
      };
      const expiresAtMs = Date.parse(record.expires_at);
      const env = stored !== null && expiresAtMs > now && container.status === 'running' ? await readEnvironment(container.id) : null;
      const secrets = env === null ? [] : Object.entries(record.environment).filter(([, v]) => referencedName(v) !== undefined).map(([k]) => env[k] ?? '').filter((v) => v !== '');
      const session: Session = {
        record, secrets, ports: {}, expiresAtMs, persistedExpiresAtMs: expiresAtMs,
        state: 'live', deletion: null, execs: new Set(), ready: Promise.resolve(),
      };
      this.#sessions.set(sessionId, session);
      if (env === null) {
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
