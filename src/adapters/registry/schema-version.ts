import { RoboguideError } from '../../core/errors.js';

/** Refuses a registry whose schema a newer tool wrote (SQLite's and PostgreSQL's alike): never migrate it down. */
export function refuseNewerSchema(current: number, supported: number): void {
  if (current > supported)
    throw new RoboguideError(
      'E_REGISTRY',
      `registry schema version ${current} is newer than this tool (${supported})`,
      {
        context: { current, supported },
        suggestions: ['Upgrade roboguide-eval, or point --registry at another database.'],
      },
    );
}
