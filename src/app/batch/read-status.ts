import type { EvidenceStore } from '../../adapters/fs/evidence-store.js';
import type { ContainerRuntime } from '../ports/container-runtime.js';
import { loadBatch, readJobFiles } from './batch-context.js';
import { buildStatus, type BatchStatus } from './status.js';

/** A fresh status from the evidence and the engine (read-only: status.json is not rewritten). */
export async function readStatus(store: EvidenceStore, runtime: ContainerRuntime | undefined, now: Date): Promise<BatchStatus> {
  const { batch, manifest } = await loadBatch(store);
  return buildStatus({
    store,
    batch,
    manifest,
    files: await readJobFiles(store, manifest),
    journal: await store.readJournal(),
    ...(runtime ? { runtime } : {}),
    now,
  });
}
