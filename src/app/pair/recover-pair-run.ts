import { RECEIPT_FILE, RESULT_FILE } from '../../core/evidence-names.js';
import { isReceipt, type Receipt } from '../../core/receipt.js';
import { isResultRecord, type ResultRecord } from '../../core/result.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import { ExitCode, InternalError, RoboguideError } from '../../core/errors.js';
import type { CleanupRecord } from '../../core/cleanup-record.js';
import type { ExecutePairDeps } from './execute-pair-types.js';
import type { CapacityRegistry } from '../ports/capacity-registry.js';
import type { ReconcileReport } from './reconcile-pair.js';
import { recoverClaimedPair } from './recover.js';
import { reconcileClaimed } from './finish.js';

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
  const reservationOf = async (): Promise<string | null> =>
    receipt.reservation_id === null
      ? null
      : ((await deps.registry.reservation(receipt.reservation_id))?.state ?? null);
  const before = await reservationOf();
  const ports = { store, registry: deps.registry, execute: deps };
  let recovered: { result: ResultRecord; containers: string[]; cleanup: CleanupRecord } | null = null;
  let reconciliation: ReconcileReport;
  if (kept === null) {
    // Nobody would watch a container now: every one of the claim is removed, the pair is `lost_worker`.
    const containers = await claimContainers(deps, receipt);
    const plan = {
      jobRel: '.',
      stopBudgetSec: options.stopBudgetSec,
      allowedHttpStatuses: [],
      onResultUnwritten: 'throw',
      secretsOf: secretCandidates,
    } as const;
    const done = await recoverClaimedPair(ports, receipt, plan, {}, { reattach: false, containers });
    if (done.finish.kind !== 'reconciled') throw new InternalError('an unwritten result is thrown');
    recovered = { result: done.result, containers, cleanup: done.cleanup };
    reconciliation = done.finish.report;
  } else reconciliation = await reconcileClaimed(ports, { jobRel: '.' }, {}, receipt);
  const result = recovered?.result ?? (kept as ResultRecord);
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

/** The containers labelled with the claim, and the receipt's own. */
async function claimContainers(deps: RecoverPairRunDeps, receipt: Receipt): Promise<string[]> {
  const found = (await deps.runtime.listByLabel({ 'roboguide.claim': receipt.claim_id })).map((c) => c.id);
  return [...new Set([...found, ...(receipt.container_id !== null ? [receipt.container_id] : [])])];
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
