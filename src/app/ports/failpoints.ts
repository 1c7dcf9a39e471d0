/**
 * Named points on the crash-relevant paths (SPEC §4): the supervisor's own steps (`after_reserve`, `after_claim`, …)
 * and one pair per write site, passed just before and just after the write becomes durable:
 * `write:<file>:temp_written|renamed`, `publish:<file>:temp_written|linked`, `journal:<event type>` (after the
 * fsync), `log_opened:<file>`, and `registry:<operation>:in_txn|committed` (inside the transaction before COMMIT,
 * and after it). Pause points (`after_container_created`) let an engine-fault test act on the world mid-pair.
 *
 * What a point does is a test hook installed by the process (src/adapters/env-failpoints.ts reads it from the
 * environment: kill the process, trace the points passed, wait for a file). Installed by nobody, as in production,
 * every point is a cheap no-op. A module-level hook rather than a port in every deps object: the points sit inside
 * the evidence store and the registry transaction, below any deps a use-case passes. It lives with the ports because
 * driven adapters pass points too (the registry transaction) and env-failpoints implements the hooks.
 */
export interface FailpointHooks {
  /** Passing a kill point (may SIGKILL the process; never returns an error). */
  hit(name: string): void;
  /** Passing a pause point: resolves when the test lets the process go on. */
  pause(name: string): Promise<void>;
}

let hooks: FailpointHooks | null = null;

/** Installs the process's failpoint hooks (null: none). */
export function installFailpoints(installed: FailpointHooks | null): void {
  hooks = installed;
}

export function failpoint(name: string): void {
  hooks?.hit(name);
}

export async function pausepoint(name: string): Promise<void> {
  if (hooks !== null) await hooks.pause(name);
}
