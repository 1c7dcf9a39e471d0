/**
 * Every file and folder name of the evidence (SPEC §4), in one place. Paths built from them are relative to the
 * output directory (a batch's D, or a `pair run`'s folder); job folders sit under `jobs/<job id>/`.
 */

/** The batch output directory. */
export const MANIFEST_FILE = 'manifest.json';
export const BATCH_FILE = 'batch.json';
export const SUPERVISOR_FILE = 'supervisor.json';
export const STATUS_FILE = 'status.json';
export const SUMMARY_FILE = 'SUMMARY.json';
export const STOP_FILE = 'stop-request.json';
export const SUPERVISOR_LOG = 'supervisor.log';
export const NODES_DOWN_FILE = 'nodes-down.json';
/** `e1-batch report`: the HTML report. */
export const REPORT_FILE = 'report.html';
/** The append-only journal of a batch (or of a `pair run`'s reconcile records). */
export const JOURNAL_FILE = 'events.jsonl';
export const JOBS_DIR = 'jobs';

/** A pair's folder (`jobs/<id>/` in a batch; the folder itself for `pair run`). */
export const RECEIPT_FILE = 'receipt.json';
export const RESULT_FILE = 'result.json';
export const STDOUT_LOG = 'stdout.log';
export const STDERR_LOG = 'stderr.log';
/** Every attempt an allowlisted pair (or session) made to reach beyond its container (docs/spec.md §5.6). */
export const EGRESS_FILE = 'egress.jsonl';
/** The collected session files: names the pair chooses. */
export const SESSIONS_DIR = 'sessions';
/** The pair's private outcome folder (bind-mounted at its outcome's folder): names the pair chooses. */
export const PRIVATE_OUTCOME_DIR = 'outcome';

/** `serve`: `sessions/<id>/` of the server's output directory. */
export const SESSION_FILE = 'session.json';
export const CLEANUP_FILE = 'cleanup.json';
/** `serve`: the pairs started through the API, `pairs/<id>/`. */
export const PAIRS_DIR = 'pairs';
