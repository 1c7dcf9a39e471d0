/**
 * Whether a file system could carry a project quota (docs/spec.md 5.1), from its type and mount options. Pure:
 * the adapter reads `/proc/self/mounts`. XFS enforces project quotas when mounted with `prjquota` or `pquota`
 * (`pqnoenforce` only accounts); ext4 when mounted with `prjquota` (which needs its `project` and `quota` features).
 */
export interface MountOptions {
  readonly mount: string;
  readonly type: string;
  readonly options: readonly string[];
}

export interface ProjectQuotaSupport {
  readonly supported: boolean;
  /** In words: the file system, where it is mounted, and what made the answer. */
  readonly why: string;
}

const ENFORCING: Readonly<Record<string, readonly string[]>> = {
  xfs: ['prjquota', 'pquota'],
  ext4: ['prjquota'],
};

export function projectQuotaSupport(mount: MountOptions | null): ProjectQuotaSupport {
  if (mount === null) return { supported: false, why: 'its file system is not listed in /proc/self/mounts' };
  const where = `${mount.type} on ${mount.mount}`;
  const enforcing = ENFORCING[mount.type];
  if (enforcing === undefined)
    return { supported: false, why: `${where}: no project quotas on ${mount.type}` };
  const option = mount.options.find((o) => enforcing.includes(o));
  if (option === undefined)
    return { supported: false, why: `${where}, mounted without ${enforcing.join(' or ')}` };
  return { supported: true, why: `${where}, mounted with ${option}` };
}

/** doctor's words for how a pair's disk limit is enforced on this output file system. */
export function diskEnforcementDetail(support: ProjectQuotaSupport): string {
  return support.supported
    ? `disk limits enforced by measurement; the output file system could carry a project quota (${support.why}), not set yet`
    : `disk limits enforced by measurement (a walk every 10 s; no project quota: ${support.why})`;
}
