/**
 * The states a batch is in (docs/spec.md §5): what `status.json` reports and what a journal `state` record carries.
 * Its own module because both the journal's records (`journal-events.ts`) and the fold over them (`batch-state.ts`)
 * name it.
 */
export type BatchState = 'running' | 'stopping' | 'stopped' | 'paused' | 'drained';
