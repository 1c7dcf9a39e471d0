import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Config } from '@oclif/core';
import { afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { loadManifest } from '../../src/app/load-manifest.js';
import E1BatchSchema from '../../src/commands/e1-batch/schema.js';
import { ExitCode, InvalidInputError, RoboguideError } from '../../src/core/errors.js';
import { manifestJsonSchema } from '../../src/core/manifest/json-schema.js';
import { MANIFEST_SCHEMA_ID } from '../../src/core/manifest/constants.js';

const VALID = `{
  "schema": "${MANIFEST_SCHEMA_ID}",
  "image": "pair-driver:1",
  "jobs": [ { "job_id": "p1", "argv": ["/run"], "cwd": "/w", "outcome_path": "/o/p1.json" } ]
}
`;

interface ObjectSchema {
  readonly additionalProperties: unknown;
  readonly required: readonly string[];
  readonly properties: Readonly<Record<string, Readonly<Record<string, unknown>>>>;
}

interface ManifestJsonSchemaShape extends ObjectSchema {
  readonly $schema: string;
  readonly properties: ObjectSchema['properties'] & {
    readonly jobs: { readonly items: ObjectSchema };
    readonly capacity: ObjectSchema;
  };
}

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'manifest-load-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function failure(file: string): Promise<InvalidInputError> {
  const err: unknown = await loadManifest(new NodeFileSystem(), file).catch((e: unknown) => e);
  if (!(err instanceof InvalidInputError)) throw new Error(`expected InvalidInputError, got ${String(err)}`);
  return err;
}

describe('loadManifest', () => {
  it('returns the exact bytes and the parsed manifest', async () => {
    const file = join(dir, 'm.json');
    await writeFile(file, VALID);
    const loaded = await loadManifest(new NodeFileSystem(), file);
    expect(Buffer.from(loaded.bytes).equals(Buffer.from(VALID))).toBe(true);
    expect(loaded.manifest.jobs.map((j) => j.job_id)).toEqual(['p1']);
  });

  it('throws E_MANIFEST_INVALID (exit 2) with every issue', async () => {
    const file = join(dir, 'bad.json');
    await writeFile(file, JSON.stringify({ schema: 'x', jobs: [] }));
    const err = await failure(file);
    expect(err.code).toBe('E_MANIFEST_INVALID');
    expect(err.exitCode).toBe(ExitCode.invalidInput);
    expect(err.message).toContain(`manifest ${file} is invalid`);
    expect(err.issues.map((i) => i.path)).toEqual(['schema', 'jobs']);
  });

  it('a missing file is "not found" with its absolute path (exit 2), a relative path resolved against the working directory', async () => {
    const err: unknown = await loadManifest(new NodeFileSystem(), 'no-such-dir-w24/missing.json').catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(RoboguideError);
    const e = err as RoboguideError;
    const abs = join(process.cwd(), 'no-such-dir-w24/missing.json');
    expect([e.code, e.exitCode, e.message, e.suggestions]).toEqual([
      'E_USAGE',
      2,
      `manifest not found: ${abs}`,
      [`check the path: there is no file at ${abs}`],
    ]);
  });

  it('rejects bytes that are not UTF-8', async () => {
    const file = join(dir, 'latin1.json');
    await writeFile(file, Buffer.from([0x7b, 0xff, 0x7d]));
    expect((await failure(file)).issues).toEqual([{ path: '$', rule: 'is not valid UTF-8' }]);
  });
});

describe('manifest JSON Schema', () => {
  it('describes the manifest with unknown keys forbidden and defaulted fields optional', () => {
    // The generator returns a plain JSON object (Record<string, unknown>); these assertions read its shape.
    const schema = manifestJsonSchema() as unknown as ManifestJsonSchemaShape;
    expect(schema.$schema).toBe('https://json-schema.org/draft/2020-12/schema');
    expect(schema.additionalProperties).toBe(false);
    expect(schema.required).toEqual(['schema', 'jobs']);
    const jobSchema = schema.properties.jobs.items;
    expect(jobSchema.additionalProperties).toBe(false);
    expect(jobSchema.required).toEqual(['job_id', 'argv', 'cwd', 'outcome_path']);
    expect(jobSchema.properties.timeout_seconds).toMatchObject({ default: 36060, maximum: 172800 });
    expect(schema.properties.capacity.additionalProperties).toBe(false);
  });

  it('is committed, up to date, as docs/manifest.schema.json', async () => {
    const committed = await readFile(join(import.meta.dirname, '../../docs/manifest.schema.json'), 'utf8');
    expect(JSON.parse(committed)).toEqual(manifestJsonSchema());
  });
});

describe('e1-batch schema command', () => {
  let config: Config;
  beforeAll(async () => {
    config = await Config.load(import.meta.dirname);
  });

  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('returns the schema with --json without printing text', async () => {
    const log = vi.spyOn(console, 'log').mockImplementation(() => undefined);
    const json = await new E1BatchSchema(['--json'], config).run();
    expect(log).not.toHaveBeenCalled();
    expect(json).toEqual(manifestJsonSchema());
  });

  it('prints the schema as JSON text without --json', async () => {
    const written: string[] = [];
    vi.spyOn(console, 'log').mockImplementation((line: unknown) => {
      written.push(String(line));
    });
    await new E1BatchSchema([], config).run();
    expect(JSON.parse(written.join(''))).toEqual(manifestJsonSchema());
  });
});
