import { Parser } from '@oclif/core';
import { describe, expect, it } from 'vitest';
import Start from '../../../src/commands/e1-batch/start.js';
import Run from '../../../src/commands/pair/run.js';
import Serve from '../../../src/commands/serve.js';

/** What oclif makes of `argv` against serve's flag table: the parsed flags, or the refusal's message. */
async function parseServe(argv: string[]): Promise<{ flags: Record<string, unknown> } | { refused: string }> {
  try {
    const { flags } = await Parser.parse(argv, { flags: Serve.flags, strict: true });
    return { flags };
  } catch (err) {
    return { refused: (err as Error).message };
  }
}

describe('serve: flag relations declared in the flag table (refused by the parser, before anything runs)', () => {
  it('--token-file alone is refused, naming --listen and --metrics-listen', async () => {
    const parsed = await parseServe(['--token-file', '/nonexistent/token']);
    expect(parsed).toHaveProperty('refused');
    const { refused } = parsed as { refused: string };
    expect(refused).toContain('--token-file');
    expect(refused).toContain('--listen');
    expect(refused).toContain('--metrics-listen');
  });

  it.each([['--listen'], ['--metrics-listen']])(
    '%s without --token-file is refused, naming it',
    async (flag) => {
      const parsed = await parseServe([flag, '127.0.0.1:8765']);
      expect(parsed).toHaveProperty('refused');
      expect((parsed as { refused: string }).refused).toContain('--token-file');
    },
  );

  it('either listener with --token-file parses (the token file is read later, by the command)', async () => {
    for (const flag of ['--listen', '--metrics-listen']) {
      const parsed = await parseServe([flag, '127.0.0.1:8765', '--token-file', '/nonexistent/token']);
      expect(parsed).toHaveProperty('flags');
    }
  });
});

describe('--bind-address: one definition for pair run, e1-batch start and serve', () => {
  it('has the same help text and default on all three commands', () => {
    const defs = [Run.flags['bind-address'], Start.flags['bind-address'], Serve.flags['bind-address']];
    expect(new Set(defs.map((d) => d.description)).size).toBe(1);
    expect(defs.map((d) => d.default)).toEqual(['127.0.0.1', '127.0.0.1', '127.0.0.1']);
  });
});
