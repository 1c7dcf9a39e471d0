import { describe, expect, it } from 'vitest';
import {
  openExistingEvidence,
  type ExistingEvidenceDeps,
  type ExistingRegistry,
} from '../../../src/app/existing-evidence.js';
import { RoboguideError } from '../../../src/core/errors.js';
import { fakeRegistry } from '../../support/fakes.js';

/** A world of paths that exist (directories end with /) and one registry; records what was opened. */
function world(paths: readonly string[], registry: Partial<ExistingRegistry> = {}) {
  const opened: string[] = [];
  const handle = fakeRegistry({ close: () => Promise.resolve() });
  const deps: ExistingEvidenceDeps = {
    isDirectory: (path) => Promise.resolve(paths.includes(`${path}/`)),
    exists: (path) => Promise.resolve(paths.includes(path) || paths.includes(`${path}/`)),
    locateRegistry: () => ({
      path: '/state/registry.db',
      file: true,
      open: () => {
        opened.push('/state/registry.db');
        return Promise.resolve(handle);
      },
      ...registry,
    }),
  };
  return { deps, opened, handle };
}

const WORDS = { outputSuggestion: 'pass the --output of a batch', registrySuggestion: 'pass --registry' };

async function refusal(promise: Promise<unknown>): Promise<RoboguideError> {
  const err: unknown = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(RoboguideError);
  return err as RoboguideError;
}

describe('openExistingEvidence (reconcile, pair recover)', () => {
  it('opens the registry of an existing output directory and says where it is', async () => {
    const w = world(['/d/', '/state/registry.db']);
    const got = await openExistingEvidence(w.deps, '/d', WORDS);
    expect(got).toEqual({ registry: w.handle, registryPath: '/state/registry.db' });
    expect(w.opened).toEqual(['/state/registry.db']);
  });

  it('refuses a missing output directory (exit 2, with the suggestion) before the registry is even located', async () => {
    let located = false;
    const w = world(['/state/registry.db']);
    const deps = { ...w.deps, locateRegistry: () => ((located = true), w.deps.locateRegistry(null)) };
    const err = await refusal(openExistingEvidence(deps, '/d', WORDS));
    expect([err.code, err.exitCode, err.message, err.suggestions]).toEqual([
      'E_USAGE',
      2,
      'output directory /d does not exist',
      [WORDS.outputSuggestion],
    ]);
    expect(located).toBe(false);
  });

  it('a file where the output directory should be is refused too; without words, no suggestion', async () => {
    const w = world(['/d', '/state/registry.db']);
    const err = await refusal(openExistingEvidence(w.deps, '/d', { registrySuggestion: 'x' }));
    expect([err.message, err.suggestions]).toEqual(['output directory /d does not exist', []]);
  });

  it('refuses a SQLite registry that does not exist, never creating one (nothing opened)', async () => {
    const w = world(['/d/']);
    const err = await refusal(openExistingEvidence(w.deps, '/d', WORDS));
    expect([err.code, err.exitCode, err.message, err.suggestions]).toEqual([
      'E_USAGE',
      2,
      'no capacity registry at /state/registry.db',
      ['pass --registry'],
    ]);
    expect(w.opened).toEqual([]);
  });

  it('a database server is not a file: opened without an existence check', async () => {
    const w = world(['/d/'], { path: 'postgres://rg@db/rg', file: false });
    expect((await openExistingEvidence(w.deps, '/d', WORDS)).registryPath).toBe('postgres://rg@db/rg');
    expect(w.opened).toEqual(['/state/registry.db']);
  });

  it('a refused location (a URL that is not PostgreSQL) and a refused open propagate as they are', async () => {
    const bad = new RoboguideError('E_USAGE', 'not a registry URL');
    const w = world(['/d/', '/state/registry.db']);
    await expect(
      openExistingEvidence(
        {
          ...w.deps,
          locateRegistry: () => {
            throw bad;
          },
        },
        '/d',
        WORDS,
      ),
    ).rejects.toBe(bad);
    await expect(
      openExistingEvidence(
        world(['/d/', '/state/registry.db'], { open: () => Promise.reject(bad) }).deps,
        '/d',
        WORDS,
      ),
    ).rejects.toBe(bad);
  });

  it('without --registry, the registry the evidence records is located and opened', async () => {
    const asked: (string | null)[] = [];
    const w = world(['/d/', '/srv/rg.db']);
    const deps: ExistingEvidenceDeps = {
      ...w.deps,
      recordedRegistry: (output) => Promise.resolve(output === '/d' ? '/srv/rg.db' : null),
      locateRegistry: (recorded) => (
        asked.push(recorded),
        {
          path: recorded ?? '/state/registry.db',
          file: true,
          explicit: false,
          open: () => Promise.resolve(w.handle),
        }
      ),
    };
    expect((await openExistingEvidence(deps, '/d', WORDS)).registryPath).toBe('/srv/rg.db');
    expect(asked).toEqual(['/srv/rg.db']);
  });

  it('a --registry other than the recorded one is refused (exit 2) naming both, before anything is opened', async () => {
    const w = world(['/d/', '/state/registry.db', '/srv/rg.db']);
    const deps: ExistingEvidenceDeps = {
      ...w.deps,
      recordedRegistry: () => Promise.resolve('/srv/rg.db'),
      locateRegistry: () => ({
        path: '/state/registry.db',
        file: true,
        explicit: true,
        open: () => Promise.reject(new Error('must not open')),
      }),
    };
    const err = await refusal(openExistingEvidence(deps, '/d', WORDS));
    expect([err.code, err.exitCode, err.message, err.suggestions]).toEqual([
      'E_USAGE',
      2,
      '--registry /state/registry.db is not the registry the pairs of /d were admitted in: the evidence records /srv/rg.db',
      ['omit --registry (the recorded /srv/rg.db is used), or pass --registry /srv/rg.db'],
    ]);
  });

  it('a --registry naming the recorded one is accepted', async () => {
    const w = world(['/d/', '/srv/rg.db']);
    const deps: ExistingEvidenceDeps = {
      ...w.deps,
      recordedRegistry: () => Promise.resolve('/srv/rg.db'),
      locateRegistry: () => ({
        path: '/srv/rg.db',
        file: true,
        explicit: true,
        open: () => Promise.resolve(w.handle),
      }),
    };
    expect((await openExistingEvidence(deps, '/d', WORDS)).registryPath).toBe('/srv/rg.db');
  });
});
