import { RECEIPT_FILE, RESULT_FILE } from '../core/evidence-names.js';
import { isReceipt, type Receipt } from '../core/receipt.js';
import { isResultRecord, type ResultRecord } from '../core/result.js';
import type { EvidenceStore } from './evidence/evidence-store.js';
import { ExitCode, RoboguideError } from '../core/errors.js';
import type { CleanupRecord } from '../core/cleanup-record.js';
import { lostWorkerResult } from './build-result.js';
import { writeJsonVerified } from './durable-write.js';
import type { ExecutePairDeps } from './execute-pair-types.js';
import { removeAndVerify } from './remove-and-verify.js';
import type { CapacityRegistry } from './ports/capacity-registry.js';
import { reconcilePair, type ReconcileReport } from './reconcile-pair.js';

/** The pair lifecycle's ports it needs (the same adapters as `pair run`), and the run's evidence and registry. */
export interface RecoverPairRunDeps extends Pick<
  ExecutePairDeps,
  'runtime' | 'clock' | 'logger' | 'fs' | 'host' | 'outcomes'
> {
  readonly store: EvidenceStore;
  readonly registry: CapacityRegistry;
}

export interface RecoverPairRunReport {
  readonly job_id: string;
  readonly claim_id: string;
  /** Containers of this claim found by the label sweep (and the receipt), each stopped and removed. */
  readonly containers: readonly string[];
  readonly cleanup: CleanupRecord;
  /** `written` now, or `kept` when an earlier run (or recover) had written it. */
  readonly result: 'written' | 'kept';
  readonly classification: ResultRecord['classification'];
  readonly reconciliation: ReconcileReport;
  /** True when this call released the slot; a replay releases nothing. */
  readonly released_now: boolean;
}

/**
 * `pair recover`: the `pair run` that owned `D` was killed (SIGKILL, OOM, lost host shell) and left its slot held,
 * maybe its container running. Finds every container labelled with the receipt's claim, stops and removes it
 * with verification, writes result.json from the evidence on disk (`harness_failure` / `lost_worker`, the outcome
 * kept as found, the logs as far as they were written), then releases the slot through terminal reconciliation.
 * Idempotent: a second call finds the result and the committed proof and releases nothing. Refuses while the
 * `pair run` process is alive, and a batch directory (that is `e1-batch resume`'s job).
 */
export async function recoverPairRun(
  deps: RecoverPairRunDeps,
  options: { readonly stopBudgetSec: number },
): Promise<RecoverPairRunReport> {
  const { store } = deps;
  const receipt = await recoverableReceipt(deps);
  const kept = await store.readJson(RESULT_FILE, isResultRecord);
  const recovered = kept === null ? await writeLostResult(deps, receipt, options.stopBudgetSec) : null;
  const result = recovered?.result ?? (kept as ResultRecord);
  const reservationOf = async (): Promise<string | null> =>
    receipt.reservation_id === null
      ? null
      : ((await deps.registry.reservation(receipt.reservation_id))?.state ?? null);
  const before = await reservationOf();
  const reconciliation = await reconcilePair(
    {
      store,
      registry: deps.registry,
      runtime: deps.runtime,
      readOutcomeSha256: (path) => deps.outcomes.sha256(path),
    },
    { jobRel: '.', mode: 'execute' },
  );
  const after = await reservationOf();
  return {
    job_id: receipt.job_id,
    claim_id: receipt.claim_id,
    containers: recovered?.containers ?? [],
    cleanup: recovered?.cleanup ?? result.cleanup,
    result: recovered === null ? 'kept' : 'written',
    classification: result.classification,
    reconciliation,
    released_now: before === 'held' && after === 'released',
  };
}

/** The receipt of a `pair run` whose process is gone; a refusal when it is not one, or when it still runs. */
async function recoverableReceipt(deps: RecoverPairRunDeps): Promise<Receipt> {
  const { store } = deps;
  const receipt = await store.readJson(RECEIPT_FILE, isReceipt);
  if (receipt === null) {
    throw new RoboguideError(
      'E_USAGE',
      `${store.root} holds no receipt.json: not a pair run directory (nothing was claimed there)`,
      {
        exitCode: ExitCode.invalidInput,
      },
    );
  }
  if (!receipt.batch_id.startsWith('pair-run-')) {
    throw new RoboguideError(
      'E_USAGE',
      `${store.root} is a pair of batch ${receipt.batch_id}, not a pair run`,
      {
        exitCode: ExitCode.invalidInput,
        suggestions: ['recover a batch with `e1-batch resume --output <batch dir>`'],
      },
    );
  }
  if (deps.host.isAlive(receipt.supervisor)) {
    throw new RoboguideError(
      'E_SUPERVISOR_ALIVE',
      `the pair run that owns ${store.root} is still running (pid ${receipt.supervisor.pid}): nothing was touched`,
      {
        exitCode: ExitCode.invalidInput,
        suggestions: [
          `stop it with SIGTERM (kill ${receipt.supervisor.pid}); it removes its container and releases its slot itself`,
        ],
      },
    );
  }
  return receipt;
}

/**
 * No result yet: every container of the claim stopped and removed (its variables read first, to mask them), then
 * result.json from the evidence. A result that cannot be written keeps the slot held.
 */
async function writeLostResult(
  deps: RecoverPairRunDeps,
  receipt: Receipt,
  stopBudgetSec: number,
): Promise<{
  readonly result: ResultRecord;
  readonly containers: string[];
  readonly cleanup: CleanupRecord;
}> {
  const { store, runtime } = deps;
  const containers: string[] = [];
  let cleanup: CleanupRecord = { removed: false, verified_absent: true, attempts: 0 };
  const found = (await runtime.listByLabel({ 'roboguide.claim': receipt.claim_id })).map((c) => c.id);
  const secrets = new Set<string>();
  for (const id of new Set([...found, ...(receipt.container_id !== null ? [receipt.container_id] : [])])) {
    containers.push(id);
    for (const value of secretCandidates(await runtime.environmentOf(id).catch(() => null)))
      secrets.add(value);
    const one = await removeAndVerify({ runtime, logger: deps.logger, clock: deps.clock }, id, stopBudgetSec);
    cleanup = {
      removed: cleanup.removed || one.removed,
      verified_absent: cleanup.verified_absent && one.verified_absent,
      attempts: cleanup.attempts + one.attempts,
    };
  }
  // The verdict is the pair's private copy (the host outcome_path is only written once a run finished).
  const result = await lostWorkerResult(deps, {
    store,
    jobRel: '.',
    receipt,
    containerId: containers[0] ?? null,
    cleanup,
    secrets: [...secrets],
    allowedHttpStatuses: [],
  });
  const written = await writeJsonVerified(store, RESULT_FILE, result);
  if (written.kind === 'failed') {
    throw new RoboguideError(
      'E_STORE',
      `result.json could not be written in ${store.root}; the slot stays held`,
      { cause: written.error },
    );
  }
  return { result, containers, cleanup };
}

/** Names every image sets, never a resolved `${NAME}` secret. */
const PLAIN_VARIABLES = new Set([
  'PATH',
  'HOME',
  'HOSTNAME',
  'TERM',
  'LANG',
  'PWD',
  'SHLVL',
  'ROBOGUIDE_OUTCOME_PATH',
  'ROBOGUIDE_JOB_ID',
  'ROBOGUIDE_BATCH_ID',
]);

/**
 * The values the dead `pair run` may have resolved from `${NAME}`: the pair spec is not kept on disk, so every
 * container variable of 8 characters or more (the shortest secret accepted without `--allow-short-secrets`) that
 * is not a plain system variable is masked in the outcome kept in result.json. Masking too much is the safe side.
 */
function secretCandidates(environment: Readonly<Record<string, string>> | null): string[] {
  if (environment === null) return [];
  return Object.entries(environment).flatMap(([name, value]) =>
    PLAIN_VARIABLES.has(name) || value.length < 8 ? [] : [value],
  );
}
