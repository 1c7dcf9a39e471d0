import { SESSION_FILE } from '../../core/evidence-names.js';
import { deviceRequestsFor } from '../../core/gpu/device-requests.js';
import {
  containerLimitsOf,
  effectiveLimits,
  limitDefaults,
  type ContainerLimits,
  type LimitDefaults,
} from '../../core/pair-limits.js';
import {
  checkFreeMounts,
  normalizeAbsolute,
  resolveProtectedPaths,
  type ProtectedPaths,
} from '../../core/mount-policy.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import { ApiError } from './api-error.js';
import { callerEnvironment, type CallerEnvironment } from './caller-secrets.js';
import { capabilityName } from './request-fields.js';
import type { SessionCreate } from './session-schemas.js';
import { PAIR_CAPABILITIES } from '../../core/pair-limits.js';
import type { PublishedPort, SessionEngine } from '../ports/container-runtime.js';
import { sessionRel, type Session } from './session-state.js';
import type { FileSystem } from '../ports/file-system.js';
import { DEFAULT_RUNTIME, runtimeProblem } from '../../core/oci-runtime.js';
import { guardedSource } from '../mount-stage.js';
import { MountRefusedError, protectedIdentities } from '../mount-walk.js';
import type { MountStager } from '../ports/mount-stager.js';
import type { AdmitRefusal } from '../../core/admission-rule.js';
import { effectiveEgress } from '../../core/egress/policy.js';
import type { NetworkChoice } from '../../core/pair-network.js';
import type { EgressGate } from '../ports/egress.js';
import { SessionEgress } from './session-egress.js';
import { addSessionSecrets } from './session-secrets.js';
import type { Clock } from '../ports/clock.js';

/** A session's creation before and at the engine: the refusals, then session.json and the container. */

export type Bind = { hostPath: string; containerPath: string; readOnly: boolean };

export interface CreateDeps {
  readonly engine: Pick<SessionEngine, 'imageExists' | 'info' | 'createAndStart'>;
  /** Real paths of mount sources, and the walk of each (docs/spec.md 5.3). */
  readonly fs: FileSystem;
  /** Stages mount sources onto points the engine gets; absent: the `walked` mode. */
  readonly mountStager?: MountStager;
  readonly store: EvidenceStore;
  readonly environment: Readonly<Record<string, string | undefined>>;
  readonly protectedPaths: ProtectedPaths;
  readonly bindAddress: string;
  readonly stopBudgetSec: number;
  /** `serve --allow-env`: the only names a `${NAME}` may reference. */
  readonly allowedEnv: ReadonlySet<string>;
  /** The limits of a session that asks for none; absent: the fixed fallbacks of an unknown host. */
  readonly limitDefaults?: LimitDefaults;
  /** The egress proxy (docs/spec.md §5.6); absent: mode "allowlist" is refused. */
  readonly egress?: EgressGate;
  /** A turn of the event loop between the steps of compiling a secret's masking (session-secrets.ts). */
  readonly clock: Pick<Clock, 'nextTurn'>;
}

/** Refusals before anything is held: unset references, refused mounts, a port another session publishes, no image. */
export async function checkCreate(
  deps: CreateDeps,
  body: SessionCreate,
  sessions: Iterable<Session>,
): Promise<{ resolved: CallerEnvironment; binds: Bind[] }> {
  const resolved = callerEnvironment(
    body.environment,
    body.secret_env ?? [],
    deps.environment,
    deps.allowedEnv,
    { env: 'environment', secretEnv: 'secret_env' },
  );
  const binds = await checkedMounts((path) => deps.fs.realpath(path), deps.protectedPaths, body.mounts);
  for (const port of body.ports) {
    for (const other of sessions) {
      if (other.state !== 'deleted' && other.record.ports.includes(port)) {
        throw new ApiError(
          409,
          'E_PORT_TAKEN',
          `port ${port} is already published by session ${other.record.session_id}`,
          [{ path: 'ports', rule: `port ${port} is taken` }],
        );
      }
    }
  }
  if (!(await deps.engine.imageExists(body.image))) {
    throw new ApiError(400, 'E_IMAGE_MISSING', `image ${body.image} is not present on this engine`, [
      { path: 'image', rule: 'is not present on the engine (no pulls)' },
    ]);
  }
  if (body.runtime !== undefined && body.runtime !== DEFAULT_RUNTIME) {
    const problem = runtimeProblem(
      body.runtime,
      (await deps.engine.info()).runtimeDetails ?? [],
      body.gpus !== undefined,
    );
    if (problem !== null) throw ApiError.invalid('the session request', [{ path: 'runtime', rule: problem }]);
  }
  return { resolved, binds };
}

/** session.json first (no resolved value in it), then the container, created and started. */
export async function startContainer(
  deps: CreateDeps,
  session: Session,
  request: {
    body: SessionCreate;
    env: Record<string, string>;
    binds: Bind[];
    labels: Record<string, string>;
  },
): Promise<{ id: string; ports: Readonly<Record<string, PublishedPort>> }> {
  const { body, env } = request;
  const { record } = session;
  const limits = sessionLimits(body, deps.limitDefaults);
  // Walked again from `/` now, and staged: the engine gets points no later swap of a source's path can redirect.
  const { binds, staged } = await guardedBinds(deps, request.binds);
  // Its egress (docs/spec.md §5.6): the network, and for an allowlist the lease at the proxy (its token a secret).
  const egress = new SessionEgress(deps.egress, effectiveEgress(record.network, record.egress), (token) =>
    addSessionSecrets(session, [token], deps.clock),
  );
  session.egress = egress;
  try {
    await deps.store.ensureDir(sessionRel(record.session_id));
    await deps.store.writeJsonAtomic(sessionRel(record.session_id, SESSION_FILE), record);
    const net = await egress.forCreate();
    egress.starting();
    const created = await createAndStart(deps, record, body, {
      env: { ...env, ...net.env },
      binds,
      labels: request.labels,
      limits,
      network: net.network,
      ...(net.dns !== undefined ? { dns: net.dns } : {}),
      ...(net.macAddress !== undefined ? { macAddress: net.macAddress } : {}),
    });
    egress.attached(created.id, true);
    for (const path of staged) deps.mountStager?.settled(path);
    session.staged = staged;
    return created;
  } catch (err) {
    // The engine adapter removed what it made: no container uses the points, nor the lease.
    for (const path of staged) await deps.mountStager?.release(path).catch(() => undefined);
    await egress.finish(deps.store, record.session_id, session.secrets).catch(() => undefined);
    throw err;
  }
}

function createAndStart(
  deps: CreateDeps,
  record: Session['record'],
  body: SessionCreate,
  request: {
    env: Record<string, string>;
    binds: Bind[];
    labels: Record<string, string>;
    limits: ContainerLimits;
    network: NetworkChoice;
    dns?: string[];
    macAddress?: string;
  },
): Promise<{ id: string; ports: Readonly<Record<string, PublishedPort>> }> {
  const { env, binds, limits } = request;
  return deps.engine.createAndStart({
    name: record.container_name,
    image: body.image,
    env,
    workdir: body.workdir,
    binds,
    ports: body.ports,
    bindAddress: deps.bindAddress,
    network: request.network,
    ...(request.dns !== undefined ? { dns: request.dns } : {}),
    ...(request.macAddress !== undefined ? { macAddress: request.macAddress } : {}),
    nanoCpus: limits.nanoCpus,
    memoryBytes: limits.memoryBytes,
    limits,
    deviceRequests: deviceRequestsFor(body.gpus),
    labels: { ...(body.annotations ?? {}), ...request.labels },
    stopTimeoutSec: deps.stopBudgetSec,
    runtime: body.runtime ?? DEFAULT_RUNTIME,
    user: body.user,
    capabilities: sessionCapabilities(body.cap_drop ?? []),
    command: body.command,
    extraHosts: body.extra_hosts ?? [],
  });
}

/**
 * Each mount's source walked from `/` and checked on what was found (mount-stage.ts, as for a pair's binds): staged
 * onto a point of ours, or walked with lstat when the host refuses the bind. A refusal names `mounts[i].source`.
 */
async function guardedBinds(
  deps: CreateDeps,
  binds: readonly Bind[],
): Promise<{ binds: Bind[]; staged: string[] }> {
  // No mount, nothing to guard: the protected paths are resolved only for a session that has binds to check.
  if (binds.length === 0) return { binds: [], staged: [] };
  const stager = deps.mountStager ?? null;
  const mode = stager === null ? 'walked' : await stager.mode();
  const rules = await resolveProtectedPaths(deps.protectedPaths, (path) => deps.fs.realpath(path));
  const ids = await protectedIdentities(deps.fs, rules);
  const guarded: Bind[] = [];
  const staged: string[] = [];
  try {
    for (const [index, bind] of binds.entries()) {
      const source = await guardedSource(
        { fs: deps.fs, stager },
        mode,
        bind.hostPath,
        `mounts[${index}].source`,
        {
          create: false,
          ids,
          readOnly: bind.readOnly,
          scanEndpoints: true,
        },
      );
      if (source.stagedPath !== null) staged.push(source.stagedPath);
      guarded.push({ ...bind, hostPath: source.engineSource });
    }
  } catch (err) {
    for (const path of staged) await stager?.release(path).catch(() => undefined);
    if (err instanceof MountRefusedError)
      throw ApiError.invalid('the session request', [{ path: err.field, rule: err.rule }]);
    throw err;
  }
  return { binds: guarded, staged };
}

/**
 * The registry's refusal as the API's answer (409): the host's capacity, or a writable mount nested with another
 * live container's (docs/spec.md 5.3), named by the mount whose source it is.
 */
export function admissionRefusal(binds: readonly Bind[], refusal: AdmitRefusal): ApiError {
  if (refusal.reason !== 'mount_nested')
    return new ApiError(
      409,
      'E_CAPACITY',
      `the host is at its capacity limit (${refusal.held} of ${refusal.limit} held)`,
    );
  const index = binds.findIndex((b) => normalizeAbsolute(b.hostPath) === refusal.source);
  const rule = `lies inside, or holds, ${refusal.heldSource ?? '?'}, the writable mount of a running container (batch ${refusal.holderBatchId ?? '?'})`;
  return new ApiError(409, 'E_MOUNT_NESTED', `mount source ${refusal.source ?? '?'} ${rule}`, [
    { path: `mounts[${Math.max(index, 0)}].source`, rule },
  ]);
}

/** The session's capabilities: a pair's set (docs/spec.md 5.1) less what the caller drops ("ALL": none). Never more. */
export function sessionCapabilities(capDrop: readonly string[]): string[] {
  const dropped = new Set(capDrop.map(capabilityName));
  if (dropped.has('ALL')) return [];
  return PAIR_CAPABILITIES.filter((cap) => !dropped.has(cap));
}

/**
 * A session's limits: its own fields (`memory_mb` is the former name of `memory_mib`) over the defaults, like a
 * pair's (pids 4096, a memory limit from the host, no swap beyond it, ulimits). Sessions have no disk watch.
 */
export function sessionLimits(
  body: Pick<SessionCreate, 'pids_limit' | 'memory_mib' | 'memory_mb' | 'cpus'>,
  defaults: LimitDefaults | undefined,
): ContainerLimits {
  const base =
    defaults ?? limitDefaults({ memoryTotalBytes: null, outputFreeBytes: null, maxConcurrentPairs: 1 });
  const limits = effectiveLimits(
    { pids_limit: body.pids_limit, memory_mib: body.memory_mib ?? body.memory_mb, cpus: body.cpus },
    base,
  );
  return containerLimitsOf(limits);
}

/** The mounts as real paths, refused when missing or when they reach a protected path. */
async function checkedMounts(
  realpath: (path: string) => Promise<string>,
  protectedPathsOf: ProtectedPaths,
  mounts: SessionCreate['mounts'],
): Promise<Bind[]> {
  if (mounts.length === 0) return [];
  const binds: Bind[] = [];
  const missing: { path: string; rule: string }[] = [];
  for (const [index, mount] of mounts.entries()) {
    try {
      binds.push({
        hostPath: await realpath(mount.source),
        containerPath: mount.target,
        readOnly: mount.read_only,
      });
    } catch {
      missing.push({ path: `mounts[${index}].source`, rule: "does not exist on the server's host" });
    }
  }
  if (missing.length > 0) throw ApiError.invalid('the session request', missing);
  // Protected paths as real paths too: a symlinked $HOME (/home/u → /var/home/u) must not let /var/home/u in.
  const protectedPaths = await resolveProtectedPaths(protectedPathsOf, (path) => realpath(path));
  const issues = checkFreeMounts(
    binds.map((b, index) => ({ field: `mounts[${index}].source`, hostPath: b.hostPath })),
    protectedPaths,
  );
  if (issues.length > 0)
    throw ApiError.invalid(
      'the session request',
      issues.map((i) => ({ path: i.field, rule: i.message })),
    );
  return binds;
}
