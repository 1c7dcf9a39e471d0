/** loadManifest through the FileSystem port: read failures and bytes that are not UTF-8 are exit-2 refusals. */
import { describe, expect, it } from 'vitest';
import { loadManifest } from '../../../src/app/load-manifest.js';
import type { FileSystem } from '../../../src/app/ports/file-system.js';
import { InvalidInputError } from '../../../src/core/errors.js';
import { fakeFileSystem } from '../../support/fakes.js';

/** Only readUserFile: the one call loadManifest makes. */
function fsReading(read: () => Promise<Uint8Array>): FileSystem {
  return fakeFileSystem({ readUserFile: read });
}

async function refusal(run: Promise<unknown>): Promise<InvalidInputError> {
  const err: unknown = await run.catch((e: unknown) => e);
  if (!(err instanceof InvalidInputError)) throw new Error(`expected InvalidInputError, got ${String(err)}`);
  return err;
}

describe('loadManifest (port)', () => {
  it('a file that cannot be read names its errno, never its contents', async () => {
    const denied = Object.assign(new Error('EACCES: permission denied'), { code: 'EACCES' });
    const err = await refusal(
      loadManifest(
        fsReading(() => Promise.reject(denied)),
        '/m.json',
      ),
    );
    expect(err.code).toBe('E_MANIFEST_INVALID');
    expect(err.issues).toEqual([{ path: '$', rule: 'cannot read file: EACCES' }]);
    expect(err.cause).toBe(denied);
  });

  it('bytes that are not UTF-8 are refused', async () => {
    const err = await refusal(
      loadManifest(
        fsReading(() => Promise.resolve(new Uint8Array([0x7b, 0xff, 0x7d]))),
        '/m.json',
      ),
    );
    expect(err.issues).toEqual([{ path: '$', rule: 'is not valid UTF-8' }]);
  });

  it('the bytes come back exactly as read, with the parsed manifest', async () => {
    const text = JSON.stringify({
      schema: 'roboguide.e1.batch/v0.1',
      image: 'i:1',
      jobs: [{ job_id: 'a', argv: ['x'], cwd: '/w', outcome_path: '/o/a.json' }],
    });
    const bytes = new TextEncoder().encode(text);
    const loaded = await loadManifest(
      fsReading(() => Promise.resolve(bytes)),
      '/m.json',
    );
    expect(loaded.bytes).toBe(bytes);
    expect(loaded.manifest.jobs.map((j) => j.job_id)).toEqual(['a']);
  });
});
