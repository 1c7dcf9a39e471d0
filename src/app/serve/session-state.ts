import { SESSIONS_DIR } from '../../core/evidence-names.js';
import type { LimitDefaults } from '../../core/pair-limits.js';
import { join } from 'node:path';
import type { Transform } from 'node:stream';
import type { ProtectedPaths } from '../../core/mount-policy.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { CapacityRegistry } from '../ports/capacity-registry.js';
import type { Clock } from '../ports/clock.js';
import type { MountStager } from '../ports/mount-stager.js';
import type { FileSystem } from '../ports/file-system.js';
import type { Logger } from '../ports/logger.js';
import type { ExecHandle, PublishedPort, SessionEngine } from '../ports/container-runtime.js';
import type { CleanupRecord, SessionCreate, SessionInfo } from './session-schemas.js';
import type { StoredEnvValue } from './caller-secrets.js';
import type { SessionEgress } from './session-egress.js';
import { effectiveEgress, egressInputOf, type EgressInput } from '../../core/egress/policy.js';
import type { EgressGate } from '../ports/egress.js';
import { taggedRecord } from '../../core/json-object.js';

/** How a session's container ended outside a deletion: its process exited (or was killed), or it was removed. */
export interface SessionEnd {
  readonly reason: 'exited' | 'gone';
  /** The container's exit code when the engine said it (`exited`); null otherwise. */
  readonly exitCode: number | null;
  readonly at: string;
}

export const SESSION_SCHEMA = 'roboguide.serve.session/v1' as const;
export const SESSION_ID = /^s-[0-9a-f-]{36}$/;

/** session.json: what a restarted server needs to adopt or reap the session. No resolved value is written. */
export interface SessionRecord {
  readonly schema: typeof SESSION_SCHEMA;
  readonly session_id: string;
  readonly claim_id: string;
  readonly reservation_id: string;
  readonly container_id: string | null;
  readonly container_name: string;
  readonly image: string;
  /** As requested, with every secret (a caller's literal secret) replaced by `{"secret": true}`: never a secret value. */
  readonly environment: Readonly<Record<string, StoredEnvValue>>;
  /** The caller's `user` and `workdir` (absent: the image's). */
  readonly user?: string;
  readonly workdir?: string;
  readonly ports: readonly number[];
  readonly network: 'none' | 'bridge';
  /** Its egress policy now (docs/spec.md §5.6; PUT …/egress rewrites it); absent in records written before it existed. */
  readonly egress?: EgressInput;
  /** The container's OCI runtime (`runc`, `runsc`…); absent in records written before it existed. */
  readonly runtime?: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly ttl_seconds: number;
  readonly created_at: string;
  readonly expires_at: string;
}

/**
 * `creating` until the engine has started the container: invisible to clients, never reaped, deletion waits.
 * `releasing`: the container is gone (verified) but the registry could not release the slot; a later DELETE, the
 * reaper or (after a shutdown) the next start releases it.
 */
export type SessionState = 'creating' | 'live' | 'deleting' | 'releasing' | 'deleted';

/**
 * A session in the server's memory: its record, the secrets to mask (memory only: resolved references, the caller's
 * literal secrets, and those of its execs' `env`, added as they come) and its state.
 */
export interface Session {
  record: SessionRecord;
  readonly secrets: string[];
  ports: Readonly<Record<string, PublishedPort>>;
  expiresAtMs: number;
  persistedExpiresAtMs: number;
  state: SessionState;
  deletion: Promise<CleanupRecord> | null;
  /** Why it is being deleted: the first deletion's reason, kept across retries. */
  deletionReason: CleanupRecord['reason'] | null;
  /** The verified removal, once done: a retried deletion only releases the slot. */
  removal: { readonly stopped: boolean; readonly removed: boolean } | null;
  /** The staging points its container mounts (docs/spec.md 5.3): released once its removal is verified. */
  staged?: readonly string[];
  readonly execs: Set<ExecHandle>;
  /** Execs and archive transfers running now (the per-session limits). */
  readonly active: { exec: number; archive: number };
  /** Settles when creation has finished (either way); a deletion waits for it. */
  ready: Promise<void>;
  /** Set when the engine said its container exited or was removed (not by a deletion): clients get 410. */
  ended: SessionEnd | null;
  /** Aborts its running execs (reason `session_ended`) when its container ends. */
  readonly stopExecs: AbortController;
  /** Its egress policy, network and lease at the proxy (absent: an adopted session; its record says the policy). */
  egress?: SessionEgress;
  /**
   * Its secrets' masking machine, compiled and held while the session is in memory (session-secrets.ts); and the
   * changes of its set, one after another.
   */
  secretsHeld: { release: (() => void) | null; turn: Promise<void>; closed: boolean };
}

/** A session's folder under the evidence root, or a file in it. */
export function sessionRel(sessionId: string, file?: string): string {
  return file === undefined ? join(SESSIONS_DIR, sessionId) : join('sessions', sessionId, file);
}

/** The record of a session just admitted (no container yet). */
export function newSessionRecord(
  ids: { readonly sessionId: string; readonly claimId: string; readonly reservationId: string },
  body: SessionCreate,
  nowMs: number,
  expiresAtMs: number,
  storedEnvironment: Readonly<Record<string, StoredEnvValue>>,
): SessionRecord {
  const egress = effectiveEgress(body.network, body.egress);
  return {
    schema: SESSION_SCHEMA,
    session_id: ids.sessionId,
    claim_id: ids.claimId,
    reservation_id: ids.reservationId,
    container_id: null,
    container_name: `roboguide-${ids.sessionId}`,
    image: body.image,
    environment: storedEnvironment,
    ...(body.user !== undefined ? { user: body.user } : {}),
    ...(body.workdir !== undefined ? { workdir: body.workdir } : {}),
    ports: body.ports,
    network: egress.mode === 'none' ? 'none' : 'bridge',
    egress: egressInputOf(egress),
    runtime: body.runtime ?? 'runc',
    labels: body.labels,
    ttl_seconds: body.ttl_seconds,
    created_at: new Date(nowMs).toISOString(),
    expires_at: new Date(expiresAtMs).toISOString(),
  };
}

/** The record of a container found at adoption: its session.json, or what its labels and registry row say. */
export function adoptedRecord(
  stored: SessionRecord | null,
  ids: { readonly sessionId: string; readonly claimId: string; readonly reservationId: string },
  containerId: string,
): SessionRecord {
  return {
    ...(stored ?? {
      schema: SESSION_SCHEMA,
      session_id: ids.sessionId,
      claim_id: ids.claimId,
      reservation_id: ids.reservationId,
      container_name: '',
      image: '',
      environment: {},
      ports: [],
      network: 'none',
      labels: {},
      ttl_seconds: 1,
      created_at: '',
      expires_at: new Date(0).toISOString(),
    }),
    container_id: containerId,
  };
}

export interface SessionManagerDeps {
  readonly engine: SessionEngine;
  readonly registry: CapacityRegistry;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Real paths of mount sources, and the exec log (`execs.jsonl`). */
  readonly fs: FileSystem;
  /** Stages mount sources onto points the engine gets (docs/spec.md 5.3); absent: the `walked` mode. */
  readonly mountStager?: MountStager;
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
  /** How long a DELETE insists on the engine's 404 (src/app/pair/remove-and-verify.ts); absent: its default. */
  readonly verifyAbsentTimeoutMs?: number | undefined;
  /** Per stream, per exec: output beyond this is dropped (the result says `truncated`). */
  readonly maxOutputBytes: number;
  /** The only names `${NAME}` may reference (`serve --allow-env`); every other reference is refused (400). */
  readonly allowedEnv: ReadonlySet<string>;
  /** Concurrent execs and archive transfers (uploads and downloads), per session and in all; past them: 429. */
  readonly limits: ConcurrencyLimits;
  /** The limits of a session that asks for none (issue 22); absent: the fixed fallbacks of an unknown host. */
  readonly limitDefaults?: LimitDefaults;
  /** The egress proxy (docs/spec.md §5.6); absent: egress mode "allowlist" is refused (409 E_EGRESS_UNAVAILABLE). */
  readonly egress?: EgressGate;
}

export interface ConcurrencyLimits {
  readonly execsPerSession: number;
  readonly execs: number;
  readonly archivesPerSession: number;
  readonly archives: number;
}

export const DEFAULT_CONCURRENCY_LIMITS: ConcurrencyLimits = {
  execsPerSession: 8,
  execs: 64,
  archivesPerSession: 2,
  archives: 8,
};

/** A session in memory, fresh (nothing deleted, nothing running). */
export function sessionOf(
  fields: Pick<Session, 'record' | 'expiresAtMs' | 'state'> & { readonly secrets: readonly string[] },
): Session {
  return {
    ...fields,
    secrets: [...fields.secrets],
    ports: {},
    persistedExpiresAtMs: fields.expiresAtMs,
    deletion: null,
    deletionReason: null,
    removal: null,
    execs: new Set(),
    active: { exec: 0, archive: 0 },
    ready: Promise.resolve(),
    ended: null,
    stopExecs: new AbortController(),
    secretsHeld: { release: null, turn: Promise.resolve(), closed: false },
  };
}

/** A live or deleting session as `GET /v1/sessions` lists it (`releasing` is still being deleted). */
export function sessionInfo(s: Session & { state: 'live' | 'deleting' | 'releasing' }): SessionInfo {
  return {
    session_id: s.record.session_id,
    container_id: s.record.container_id ?? '',
    image: s.record.image,
    state: s.state === 'live' ? 'live' : 'deleting',
    created_at: s.record.created_at,
    expires_at: new Date(s.expiresAtMs).toISOString(),
    labels: s.record.labels,
  };
}

/** What GET /v1/sessions lists: the sessions live or being deleted (not those still being created, nor deleted). */
export function listedSessions(sessions: Iterable<Session>): SessionInfo[] {
  return [...sessions]
    .filter(
      (s): s is Session & { state: 'live' | 'deleting' | 'releasing' } =>
        s.state === 'live' || s.state === 'deleting' || s.state === 'releasing',
    )
    .map(sessionInfo);
}

/** The check a session's `session.json` is read back through. */
export const isSessionRecord = taggedRecord<SessionRecord>(SESSION_SCHEMA, [
  'session_id',
  'claim_id',
  'container_name',
]);
