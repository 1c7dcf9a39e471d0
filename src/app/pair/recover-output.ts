import { openExistingEvidence } from '../existing-evidence.js';
import type { Clock } from '../ports/clock.js';
import type { FileSystem } from '../ports/file-system.js';
import type { HostIdentity } from '../ports/host-identity.js';
import type { Logger } from '../ports/logger.js';
import type { OutcomeReader } from '../ports/outcome-reader.js';
import type { OutputEvidenceDeps } from './reconcile-output.js';
import { recoverPairRun, type RecoverPairRunReport } from './recover-pair-run.js';

export interface RecoverOutputDeps extends OutputEvidenceDeps {
  readonly clock: Clock;
  readonly logger: Logger;
  readonly host: HostIdentity;
  readonly fs: FileSystem;
  readonly outcomes: OutcomeReader;
}

/** `pair recover`: the killed `pair run` of `output` is cleaned up, finished and its slot released. */
export async function recoverOutput(
  deps: RecoverOutputDeps,
  request: { readonly output: string; readonly stopBudgetSec: number },
): Promise<RecoverPairRunReport> {
  const { output } = request;
  const { registry } = await openExistingEvidence(deps, output, {
    registrySuggestion: 'pass --registry with the database the pair run was admitted in',
  });
  try {
    return await recoverPairRun(
      {
        store: deps.storeAt(output),
        registry,
        runtime: await deps.runtimeFor(output),
        clock: deps.clock,
        logger: deps.logger,
        host: deps.host,
        fs: deps.fs,
        outcomes: deps.outcomes,
      },
      { stopBudgetSec: request.stopBudgetSec },
    );
  } finally {
    await registry.close();
  }
}
