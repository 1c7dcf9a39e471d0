import { dirname, resolve } from 'node:path';
import { Parser } from '@oclif/core';
import { describe, expect, it } from 'vitest';
import Serve from '../../src/commands/serve.js';
import { InternalError, InvalidInputError } from '../../src/core/errors.js';
import {
  compileServeOptions,
  SERVE_DEFAULTS,
  serveTuning,
  type ServeFlagContext,
  type ServeFlags,
} from '../../src/serve-options.js';

const MIB = 1024 * 1024;
const TOKEN = 'a-token-of-sixteen-or-more';
const NONE: ServeFlagContext = { mountRoots: [], environment: {} };

/** Serve's flag table applied to `argv` by oclif (its defaults included), as the command gets it. */
async function parsed(argv: string[]): Promise<ServeFlags> {
  const { flags } = await Parser.parse(argv, { flags: Serve.flags, strict: true });
  return flags;
}

/** oclif's refusal of `argv`, or a failure when it parses. */
async function refusal(argv: string[]): Promise<string> {
  try {
    await Parser.parse(argv, { flags: Serve.flags, strict: true });
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error(`${argv.join(' ')} parsed`);
}

/** What compileServeOptions throws for these flags (it must throw). */
function thrown(flags: ServeFlags, context: ServeFlagContext): unknown {
  try {
    compileServeOptions(flags, context);
  } catch (err) {
    return err;
  }
  throw new Error('compiled');
}

describe('compileServeOptions: every default once', () => {
  it('no flags: each option is its documented default', async () => {
    const options = compileServeOptions(await parsed([]), NONE);
    expect(options).toEqual({
      mountRoots: [],
      bindAddress: '127.0.0.1',
      reapIntervalMs: 5_000,
      stopBudgetSec: 10,
      maxOutputBytes: 16 * MIB,
      streamBufferCap: 4 * MIB,
      maxBuilds: 2,
      maxBuildContextBytes: 1024 * MIB,
      allowBuilds: false,
      buildMemoryMib: 2048,
      buildTimeoutSec: 1800,
      allowEnv: [],
      limits: SERVE_DEFAULTS.limits,
    });
  });

  it('the options startServe fills in for a caller that leaves them out are the same defaults', async () => {
    const { mountRoots: _, ...fromFlags } = compileServeOptions(await parsed([]), NONE);
    expect(serveTuning({})).toEqual(fromFlags);
  });

  it('the flag table (its --help) shows the same defaults', () => {
    const d = SERVE_DEFAULTS;
    const shown = Object.fromEntries(Object.entries(Serve.flags).map(([name, f]) => [name, f.default]));
    expect(shown).toMatchObject({
      'bind-address': d.bindAddress,
      'reap-interval': d.reapIntervalSec,
      'stop-budget': d.stopBudgetSec,
      'max-execs-per-session': d.limits.execsPerSession,
      'max-execs': d.limits.execs,
      'max-archives-per-session': d.limits.archivesPerSession,
      'max-archives': d.limits.archives,
      'stream-buffer-cap': d.streamBufferCap,
      'max-builds': d.maxBuilds,
      'max-build-context-mib': d.maxBuildContextMib,
      'allow-builds': d.allowBuilds,
      'build-memory-mib': d.buildMemoryMib,
      'build-timeout-sec': d.buildTimeoutSec,
    });
  });

  it('a caller that gives some options keeps them; the rest default', () => {
    const tuning = serveTuning({ maxBuilds: 7, reapIntervalMs: 250 });
    expect(tuning.maxBuilds).toBe(7);
    expect(tuning.reapIntervalMs).toBe(250);
    expect(tuning.stopBudgetSec).toBe(SERVE_DEFAULTS.stopBudgetSec);
  });
});

describe('compileServeOptions: flags to options', () => {
  it('converts units and carries every flag', async () => {
    const flags = await parsed([
      '--socket=/run/x/api.sock',
      '--data-dir=/srv/data',
      '--registry=/srv/registry.db',
      '--bind-address=0.0.0.0',
      '--reap-interval=3',
      '--stop-budget=4',
      '--max-execs-per-session=5',
      '--max-execs=6',
      '--max-archives-per-session=7',
      '--max-archives=8',
      '--stream-buffer-cap=70000',
      '--max-builds=9',
      '--max-build-context-mib=10',
      '--allow-builds',
      '--build-memory-mib=128',
      '--build-timeout-sec=11',
      '--allow-env=HOME',
      '--allow-env=HOME',
      '--allow-env=LANG',
    ]);
    const options = compileServeOptions(flags, { ...NONE, mountRoots: ['/srv'] });
    expect(options).toEqual({
      socketPath: '/run/x/api.sock',
      dataDir: '/srv/data',
      registryPath: '/srv/registry.db',
      mountRoots: ['/srv'],
      bindAddress: '0.0.0.0',
      reapIntervalMs: 3_000,
      stopBudgetSec: 4,
      maxOutputBytes: 16 * MIB,
      streamBufferCap: 70_000,
      maxBuilds: 9,
      maxBuildContextBytes: 10 * MIB,
      allowBuilds: true,
      buildMemoryMib: 128,
      buildTimeoutSec: 11,
      allowEnv: ['HOME', 'LANG'],
      limits: { execsPerSession: 5, execs: 6, archivesPerSession: 7, archives: 8 },
    });
  });

  it('--listen and --metrics-listen: loopback listeners with the token; the token file folder is ours', async () => {
    const flags = await parsed([
      '--listen=localhost:8765',
      '--metrics-listen=[::1]:9100',
      '--token-file=tokens/serve.token',
    ]);
    const options = compileServeOptions(flags, { ...NONE, token: TOKEN });
    expect(options.listen).toEqual({ host: '127.0.0.1', port: 8765, token: TOKEN });
    expect(options.metricsListen).toEqual({ host: '::1', port: 9100, token: TOKEN });
    expect(options.ownedDirs).toEqual([dirname(resolve('tokens/serve.token'))]);
  });

  it.each([
    ['--listen', '0.0.0.0:8765'],
    ['--listen', '127.0.0.1:70000'],
    ['--metrics-listen', 'example.com:9100'],
  ])('%s %s is refused (exit 2), naming the flag and the rule', async (flag, value) => {
    const flags = await parsed([`${flag}=${value}`, '--token-file=/t']);
    const err = thrown(flags, { ...NONE, token: TOKEN });
    expect(err).toBeInstanceOf(InvalidInputError);
    expect((err as InvalidInputError).issues).toEqual([
      { path: flag, rule: 'must be 127.0.0.1:PORT (loopback only)' },
    ]);
  });

  it('a listener compiled without the token is a bug of ours, not a usage error', async () => {
    const err = thrown(await parsed(['--listen=127.0.0.1:1', '--token-file=/t']), NONE);
    expect(err).toBeInstanceOf(InternalError);
  });

  it('--allow-env: each refused name is named (PG*, ours, not a name, the one holding the token)', async () => {
    const flags = await parsed([
      '--listen=127.0.0.1:8765',
      '--token-file=/t',
      '--allow-env=PGPASSWORD',
      '--allow-env=ROBOGUIDE_X',
      '--allow-env=1BAD',
      '--allow-env=SERVE_TOKEN',
      '--allow-env=LANG',
    ]);
    const err = thrown(flags, { mountRoots: [], token: TOKEN, environment: { SERVE_TOKEN: `${TOKEN}\n` } });
    expect(err).toBeInstanceOf(InvalidInputError);
    const issues = (err as InvalidInputError).issues;
    expect(issues.map((i) => i.path)).toEqual(['--allow-env', '--allow-env', '--allow-env', '--allow-env']);
    expect(issues.map((i) => i.rule.split(/[ :]/)[0])).toEqual([
      'PGPASSWORD',
      'ROBOGUIDE_X',
      '1BAD',
      'SERVE_TOKEN',
    ]);
  });
});

describe('serve: flag relations are declared in the flag table (oclif refuses, naming the flags)', () => {
  it('--token-file needs --listen or --metrics-listen', async () => {
    const message = await refusal(['--token-file=/t']);
    expect(message).toContain('--token-file');
    expect(message).toContain('--listen');
    expect(message).toContain('--metrics-listen');
  });

  it.each([['--listen'], ['--metrics-listen']])('%s needs --token-file', async (flag) => {
    expect(await refusal([`${flag}=127.0.0.1:8765`])).toContain('--token-file');
  });

  it('--mount-root-only needs --mount-root', async () => {
    const message = await refusal(['--mount-root-only']);
    expect(message).toContain('--mount-root');
  });

  it.each([
    ['--reap-interval=0', '--reap-interval'],
    ['--stream-buffer-cap=1000', '--stream-buffer-cap'],
    ['--build-memory-mib=1', '--build-memory-mib'],
  ])('%s is below the least value and refused', async (arg, flag) => {
    expect(await refusal([arg])).toContain(flag.slice(2));
  });
});
