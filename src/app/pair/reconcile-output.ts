import type { EvidenceStore } from '../evidence/evidence-store.js';
import { openExistingEvidence, type ExistingEvidenceDeps } from '../existing-evidence.js';
import type { ContainerRuntime } from '../ports/container-runtime.js';
import {
  reconcileBatch,
  type ReconcileBatchResult,
  type ReconcileDeps,
  type ReconcileMode,
} from './reconcile-pair.js';

/** The evidence of an output directory, as the composition root wires it. */
export interface OutputEvidenceDeps extends ExistingEvidenceDeps {
  readonly storeAt: (output: string) => EvidenceStore;
  /** The runtime that owns the pairs of `output` (a batch's recorded executor, else the local engine). */
  readonly runtimeFor: (output: string) => Promise<ContainerRuntime>;
}

export interface ReconcileOutputDeps extends OutputEvidenceDeps {
  readonly readOutcomeSha256: ReconcileDeps['readOutcomeSha256'];
}

/** `reconcile`: terminal reconciliation of every finished pair of `output` (a batch, or a `pair run` directory). */
export async function reconcileOutput(
  deps: ReconcileOutputDeps,
  request: { readonly output: string; readonly mode: ReconcileMode; readonly jobId?: string },
): Promise<ReconcileBatchResult & { readonly registryPath: string }> {
  const { output } = request;
  const { registry, registryPath } = await openExistingEvidence(deps, output, {
    outputSuggestion: 'pass the --output directory of a batch or a pair run',
    registrySuggestion: 'pass --registry with the database the batch was admitted in',
  });
  try {
    const reconcile = {
      store: deps.storeAt(output),
      registry,
      runtime: await deps.runtimeFor(output),
      readOutcomeSha256: deps.readOutcomeSha256,
    };
    const result = await reconcileBatch(reconcile, {
      mode: request.mode,
      ...(request.jobId !== undefined ? { jobId: request.jobId } : {}),
    });
    return { ...result, registryPath };
  } finally {
    await registry.close();
  }
}
