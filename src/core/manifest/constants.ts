/** Identity and defaults of the batch manifest (SPEC §3). */
export const MANIFEST_SCHEMA_ID = 'roboguide.e1.batch/v0.1';

/** Per-pair outer wall budget: default and ceiling, in seconds. */
export const DEFAULT_TIMEOUT_SECONDS = 36_060;
export const MAX_TIMEOUT_SECONDS = 172_800;

/** Where Codex writes session files inside the container (`CODEX_HOME=/root/.codex`). */
export const DEFAULT_SESSIONS_DIR = '/root/.codex/sessions';

/** Controlled-stop budget: default and ceiling, in seconds. */
export const DEFAULT_STOP_BUDGET_SECONDS = 240;
export const MAX_STOP_BUDGET_SECONDS = 3_600;

/** Per-stream cap on a pair's stdout/stderr log: default, floor and ceiling, in bytes (issue 10 part 6). */
export const DEFAULT_LOG_LIMIT_BYTES = 1024 ** 3;
export const MIN_LOG_LIMIT_BYTES = 64 * 1024;
export const MAX_LOG_LIMIT_BYTES = 1024 ** 4;

/** `b1_ports: true` injects exactly this many ports as ROBOGUIDE_B1_*_PORT (SPEC §9). */
export const B1_PORT_COUNT = 6;

/** A safe single path segment (it names `jobs/<id>/`): this alphabet, and never `.` or `..`. */
export const JOB_ID_PATTERN = /^(?!\.{1,2}$)[A-Za-z0-9._-]{1,128}$/;
export const ENV_NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** Environment names the supervisor sets itself (ROBOGUIDE_BATCH_ID, ROBOGUIDE_B1_*…). */
export const RESERVED_ENV_PREFIX = 'ROBOGUIDE_';
export const SHA256_HEX_PATTERN = /^[0-9a-f]{64}$/;
