import { MANIFEST_SCHEMA_ID } from '../../src/core/manifest/constants.js';
import { parseManifest } from '../../src/core/manifest/parse.js';
import type { Manifest } from '../../src/core/manifest/schema.js';

/**
 * A whole, valid Manifest through the real parser (its defaults included) from the fields a test cares about; each
 * job gets an argv, a cwd and an outcome path unless it names them. A manifest the parser refuses fails the set-up.
 */
export function manifestOf(
  jobs: readonly ({ readonly job_id: string } & Record<string, unknown>)[],
  fields: Record<string, unknown> = {},
): Manifest {
  const parsed = parseManifest(
    JSON.stringify({
      schema: MANIFEST_SCHEMA_ID,
      image: 'roboguide/pair-driver:1',
      ...fields,
      jobs: jobs.map((job) => ({
        argv: ['/opt/driver/run'],
        cwd: `/work/${job.job_id}`,
        outcome_path: `/out/${job.job_id}.json`,
        ...job,
      })),
    }),
  );
  if (!parsed.ok) throw new Error(`set-up: the manifest is refused: ${JSON.stringify(parsed.issues)}`);
  return parsed.manifest;
}
