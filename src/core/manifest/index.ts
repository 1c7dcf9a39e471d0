export {
  DEFAULT_SESSIONS_DIR,
  DEFAULT_STOP_BUDGET_SECONDS,
  DEFAULT_TIMEOUT_SECONDS,
  MANIFEST_SCHEMA_ID,
  MAX_STOP_BUDGET_SECONDS,
  MAX_TIMEOUT_SECONDS,
} from './constants.js';
export {
  environmentReferences,
  referencedName,
  referencedValues,
  resolveEnvironment,
  type EnvironmentResolution,
  type ResolveOptions,
} from './environment.js';
export { manifestJsonSchema } from './json-schema.js';
export {
  jobImage,
  jobRuntime,
  jobEgress,
  parseManifest,
  parsePairSpec,
  type ManifestParse,
  type PairSpecParse,
} from './parse.js';
export type { Capacity, ContinuationOf, GpuRequest, Job, Manifest, PairSpec } from './schema.js';
export {
  isCredentialLikePath,
  isSecretLookingName,
  isUrlWithPassword,
  MIN_SECRET_VALUE_LENGTH,
} from './secrets.js';
