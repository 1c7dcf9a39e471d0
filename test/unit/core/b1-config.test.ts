import { Config } from '@oclif/core';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import B1ConfigCommand from '../../../src/commands/b1/config.js';
import {
  B1_BUDGET_VARIABLE,
  B1_PORT_VARIABLES,
  b1PortEnvironment,
  describeB1Config,
  parseB1Config,
  renderB1Config,
  type B1Config,
} from '../../../src/core/b1-config.js';
import { InvalidInputError, RoboguideError } from '../../../src/core/errors.js';

const VALID_PORTS = ['41000', '41001', '41002', '41003', '41004', '41005'] as const;

function validEnv(): Record<string, string | undefined> {
  return Object.fromEntries(B1_PORT_VARIABLES.map((variable, i) => [variable, VALID_PORTS[i]]));
}

const EXPECTED_CONFIG: B1Config = {
  controller_grpc_port: 41000,
  controller_port: 41001,
  artifact_port: 41002,
  habitat_port: 41003,
  habitat_port_b: 41004,
  mission_port: 41005,
  mission_observation_budget_seconds: 1800,
};

interface MatrixCase {
  readonly name: string;
  readonly env: Record<string, string | undefined>;
  /** Variables that must be named as issue paths; empty = valid. */
  readonly failing: readonly string[];
  readonly budget?: number;
}

const BAD_PORTS = [
  '',
  '+1',
  '1.0',
  '0x10',
  ' 80',
  '80 ',
  '65536',
  '0',
  '080',
  '-1',
  '1e3',
  'abc',
  '99999999999999999999',
];
const BAD_BUDGETS = ['', '0', '86401', '+5', '1.5', ' 60', 'abc', '-1', '0x10'];

function buildMatrix(): MatrixCase[] {
  const cases: MatrixCase[] = [
    { name: 'all valid, budget default', env: validEnv(), failing: [], budget: 1800 },
  ];
  for (const variable of B1_PORT_VARIABLES) {
    cases.push({
      name: `${variable} missing`,
      env: { ...validEnv(), [variable]: undefined },
      failing: [variable],
    });
    for (const bad of BAD_PORTS)
      cases.push({
        name: `${variable}=${JSON.stringify(bad)}`,
        env: { ...validEnv(), [variable]: bad },
        failing: [variable],
      });
    for (const edge of ['1', '65535'])
      cases.push({ name: `${variable}=${edge}`, env: { ...validEnv(), [variable]: edge }, failing: [] });
  }
  for (const [i, first] of B1_PORT_VARIABLES.entries()) {
    for (const second of B1_PORT_VARIABLES.slice(i + 1)) {
      cases.push({
        name: `${second} duplicates ${first}`,
        env: { ...validEnv(), [second]: validEnv()[first] },
        failing: [second],
      });
    }
  }
  for (const budget of ['1', '1800', '86400']) {
    cases.push({
      name: `budget=${budget}`,
      env: { ...validEnv(), [B1_BUDGET_VARIABLE]: budget },
      failing: [],
      budget: Number(budget),
    });
  }
  for (const bad of BAD_BUDGETS) {
    cases.push({
      name: `budget=${JSON.stringify(bad)}`,
      env: { ...validEnv(), [B1_BUDGET_VARIABLE]: bad },
      failing: [B1_BUDGET_VARIABLE],
    });
  }
  cases.push({ name: 'nothing set', env: {}, failing: [...B1_PORT_VARIABLES] });
  return cases;
}

const MATRIX = buildMatrix();

describe('parseB1Config matrix', () => {
  it('has 125 cases: 1 valid + 6 vars × (missing + 13 bad + 2 edges) + 15 duplicate pairs + 3 good and 9 bad budgets + nothing set', () => {
    const invalid = MATRIX.filter((c) => c.failing.length > 0).length;
    console.log(
      `b1 config matrix: ${MATRIX.length} cases (${MATRIX.length - invalid} valid, ${invalid} invalid)`,
    );
    expect(MATRIX).toHaveLength(1 + 6 * 16 + 15 + 3 + 9 + 1);
  });

  it.each(MATRIX)('$name', ({ env, failing, budget }) => {
    const parsed = parseB1Config(env);
    if (failing.length === 0) {
      expect(parsed.ok).toBe(true);
      if (parsed.ok && budget !== undefined)
        expect(parsed.config.mission_observation_budget_seconds).toBe(budget);
      return;
    }
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) expect(parsed.issues.map((issue) => issue.path)).toEqual(failing);
  });
});

describe('parseB1Config details', () => {
  it('maps each variable to its field', () => {
    expect(parseB1Config(validEnv())).toEqual({ ok: true, config: EXPECTED_CONFIG });
  });

  it('names both variables of a duplicate, and each later duplicate of a triple', () => {
    const env = { ...validEnv(), ROBOGUIDE_B1_HABITAT_PORT_B: '41001', ROBOGUIDE_B1_MISSION_PORT: '41001' };
    const parsed = parseB1Config(env);
    expect(parsed).toEqual({
      ok: false,
      issues: [
        {
          path: 'ROBOGUIDE_B1_HABITAT_PORT_B',
          rule: 'must differ from ROBOGUIDE_B1_CONTROLLER_PORT (both are 41001)',
        },
        {
          path: 'ROBOGUIDE_B1_MISSION_PORT',
          rule: 'must differ from ROBOGUIDE_B1_CONTROLLER_PORT (both are 41001)',
        },
      ],
    });
  });

  it('reports every problem at once', () => {
    const env = {
      ...validEnv(),
      ROBOGUIDE_B1_ARTIFACT_PORT: '0x10',
      ROBOGUIDE_B1_HABITAT_PORT: undefined,
      [B1_BUDGET_VARIABLE]: '0',
    };
    const parsed = parseB1Config(env);
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) {
      expect(parsed.issues.map((i) => i.path)).toEqual([
        'ROBOGUIDE_B1_ARTIFACT_PORT',
        'ROBOGUIDE_B1_HABITAT_PORT',
        B1_BUDGET_VARIABLE,
      ]);
      expect(parsed.issues[1]?.rule).toMatch(/is required/);
    }
  });

  it('exports the six variables in the documented order', () => {
    expect(B1_PORT_VARIABLES).toEqual([
      'ROBOGUIDE_B1_CONTROLLER_GRPC_PORT',
      'ROBOGUIDE_B1_CONTROLLER_PORT',
      'ROBOGUIDE_B1_ARTIFACT_PORT',
      'ROBOGUIDE_B1_HABITAT_PORT',
      'ROBOGUIDE_B1_HABITAT_PORT_B',
      'ROBOGUIDE_B1_MISSION_PORT',
    ]);
  });
});

describe('renderB1Config', () => {
  it('renders node, mission and the two URLs from the one config', () => {
    expect(renderB1Config({ ...EXPECTED_CONFIG, mission_observation_budget_seconds: 600 })).toEqual({
      node: {
        controller: { grpc_port: 41000, http_port: 41001 },
        artifact_port: 41002,
        habitat: { port: 41003, port_b: 41004 },
      },
      mission: { port: 41005, observation_budget_seconds: 600 },
      collection_url: 'http://127.0.0.1:41002/collect',
      archive_url: 'http://127.0.0.1:41002/archive',
    });
  });

  it('describes every value with its variable for operators', () => {
    const text = describeB1Config(EXPECTED_CONFIG, true);
    for (const [i, variable] of B1_PORT_VARIABLES.entries())
      expect(text).toMatch(new RegExp(`${variable}\\s+${VALID_PORTS[i]}`));
    expect(text).toMatch(/OBSERVATION_BUDGET_SECONDS\s+1800 s \(default\)/);
    expect(text).toContain('archive_url          http://127.0.0.1:41002/archive');
    expect(describeB1Config(EXPECTED_CONFIG, false)).not.toContain('(default)');
  });
});

describe('b1PortEnvironment', () => {
  it('maps six ports in order to the six variables, and round-trips through parseB1Config', () => {
    const env = b1PortEnvironment([41000, 41001, 41002, 41003, 41004, 41005]);
    expect(env).toEqual(validEnv());
    expect(parseB1Config(env)).toEqual({ ok: true, config: EXPECTED_CONFIG });
  });

  it.each([
    { ports: [1, 2, 3, 4, 5], path: 'ports' },
    { ports: [1, 2, 3, 4, 5, 6, 7], path: 'ports' },
    { ports: [1, 2, 3, 4, 5, 5], path: 'ports[5]' },
    { ports: [0, 2, 3, 4, 5, 6], path: 'ports[0]' },
    { ports: [1, 2, 65536, 4, 5, 6], path: 'ports[2]' },
    { ports: [1, 2, 3, 4.5, 5, 6], path: 'ports[3]' },
    { ports: [1, 2, 3, 4, 5, Number.NaN], path: 'ports[5]' },
  ])('rejects $ports at $path', ({ ports, path }) => {
    let caught: unknown;
    try {
      b1PortEnvironment(ports);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(RoboguideError);
    expect((caught as RoboguideError).code).toBe('E_B1_CONFIG_INVALID');
    expect((caught as InvalidInputError).issues[0]?.path).toBe(path);
  });
});

describe('b1 config command', () => {
  let config: Config;
  beforeAll(async () => {
    config = await Config.load(import.meta.dirname);
  });
  afterEach(() => {
    vi.unstubAllEnvs();
    vi.restoreAllMocks();
  });

  function stubEnv(env: Record<string, string | undefined>): void {
    for (const variable of [...B1_PORT_VARIABLES, B1_BUDGET_VARIABLE]) vi.stubEnv(variable, env[variable]);
  }

  it('returns {config, rendered} for --json', async () => {
    stubEnv({ ...validEnv(), [B1_BUDGET_VARIABLE]: '900' });
    const log = vi.spyOn(console, 'log').mockImplementation(() => undefined);
    const json = await new B1ConfigCommand(['--json'], config).run();
    expect(log).not.toHaveBeenCalled();
    expect(json.config).toEqual({ ...EXPECTED_CONFIG, mission_observation_budget_seconds: 900 });
    expect(json.rendered.collection_url).toBe('http://127.0.0.1:41002/collect');
  });

  it('prints a readable block without --json', async () => {
    stubEnv(validEnv());
    const written: string[] = [];
    vi.spyOn(console, 'log').mockImplementation((line: unknown) => {
      written.push(String(line));
    });
    await new B1ConfigCommand([], config).run();
    expect(written.join('')).toContain('B1 launcher configuration: valid');
    expect(written.join('')).toContain('1800 s (default)');
  });

  it('fails with exit 2 naming the bad variable', async () => {
    stubEnv({ ...validEnv(), ROBOGUIDE_B1_MISSION_PORT: '70000' });
    const failure = await new B1ConfigCommand([], config).run().catch((err: unknown) => err);
    expect(failure).toBeInstanceOf(InvalidInputError);
    expect((failure as InvalidInputError).exitCode).toBe(2);
    expect((failure as InvalidInputError).code).toBe('E_B1_CONFIG_INVALID');
    expect((failure as InvalidInputError).message).toContain(
      'ROBOGUIDE_B1_MISSION_PORT: must be a decimal integer 1..65535',
    );
  });
});
