import { InvalidInputError, type Issue } from './errors.js';

/**
 * B1 launcher configuration (SPEC §9): six distinct ports and a mission observation budget,
 * read from the environment, validated once, and rendered into the node/mission configuration
 * and the collection/archive URLs, so every consumer derives from the same validated values.
 */
export const B1_PORT_VARIABLES = [
  'ROBOGUIDE_B1_CONTROLLER_GRPC_PORT',
  'ROBOGUIDE_B1_CONTROLLER_PORT',
  'ROBOGUIDE_B1_ARTIFACT_PORT',
  'ROBOGUIDE_B1_HABITAT_PORT',
  'ROBOGUIDE_B1_HABITAT_PORT_B',
  'ROBOGUIDE_B1_MISSION_PORT',
] as const;
export type B1PortVariable = (typeof B1_PORT_VARIABLES)[number];

export const B1_BUDGET_VARIABLE = 'ROBOGUIDE_B1_MISSION_OBSERVATION_BUDGET_SECONDS';
export const B1_DEFAULT_BUDGET_SECONDS = 1800;
export const B1_MAX_BUDGET_SECONDS = 86_400;
/** Loopback: the launcher and its services run inside the same pair container. */
export const B1_HOST = '127.0.0.1';

export interface B1Config {
  readonly controller_grpc_port: number;
  readonly controller_port: number;
  readonly artifact_port: number;
  readonly habitat_port: number;
  readonly habitat_port_b: number;
  readonly mission_port: number;
  readonly mission_observation_budget_seconds: number;
}

export interface B1Rendered {
  readonly node: {
    readonly controller: { readonly grpc_port: number; readonly http_port: number };
    readonly artifact_port: number;
    readonly habitat: { readonly port: number; readonly port_b: number };
  };
  readonly mission: { readonly port: number; readonly observation_budget_seconds: number };
  readonly collection_url: string;
  readonly archive_url: string;
}

export type B1ConfigParse = { ok: true; config: B1Config } | { ok: false; issues: Issue[] };

const CONFIG_KEY: Readonly<Record<B1PortVariable, keyof B1Config>> = {
  ROBOGUIDE_B1_CONTROLLER_GRPC_PORT: 'controller_grpc_port',
  ROBOGUIDE_B1_CONTROLLER_PORT: 'controller_port',
  ROBOGUIDE_B1_ARTIFACT_PORT: 'artifact_port',
  ROBOGUIDE_B1_HABITAT_PORT: 'habitat_port',
  ROBOGUIDE_B1_HABITAT_PORT_B: 'habitat_port_b',
  ROBOGUIDE_B1_MISSION_PORT: 'mission_port',
};

/** Plain decimal: no sign, no leading zero, no spaces, no fraction, no exponent, no hex. */
const DECIMAL = /^[1-9][0-9]*$/;
const PORT_RULE = 'must be a decimal integer 1..65535';
const BUDGET_RULE = `must be a decimal integer 1..${B1_MAX_BUDGET_SECONDS} (seconds; default ${B1_DEFAULT_BUDGET_SECONDS})`;

function decimalIn(text: string, max: number): number | null {
  if (!DECIMAL.test(text) || text.length > 6) return null;
  const value = Number(text);
  return value <= max ? value : null;
}

export function parseB1Config(env: Readonly<Record<string, string | undefined>>): B1ConfigParse {
  const issues: Issue[] = [];
  const ports = new Map<B1PortVariable, number>();
  const ownerOfPort = new Map<number, B1PortVariable>();
  for (const variable of B1_PORT_VARIABLES) {
    const text = env[variable];
    if (text === undefined) {
      issues.push({ path: variable, rule: `is required (${PORT_RULE})` });
      continue;
    }
    const port = decimalIn(text, 65_535);
    if (port === null) {
      issues.push({ path: variable, rule: PORT_RULE });
      continue;
    }
    const owner = ownerOfPort.get(port);
    if (owner !== undefined)
      issues.push({ path: variable, rule: `must differ from ${owner} (both are ${port})` });
    else ownerOfPort.set(port, variable);
    ports.set(variable, port);
  }
  const budgetText = env[B1_BUDGET_VARIABLE];
  const budget =
    budgetText === undefined ? B1_DEFAULT_BUDGET_SECONDS : decimalIn(budgetText, B1_MAX_BUDGET_SECONDS);
  if (budget === null) issues.push({ path: B1_BUDGET_VARIABLE, rule: BUDGET_RULE });
  if (issues.length > 0 || budget === null) return { ok: false, issues };
  const config = { mission_observation_budget_seconds: budget } as Record<keyof B1Config, number>;
  for (const [variable, port] of ports) config[CONFIG_KEY[variable]] = port;
  return { ok: true, config };
}

/**
 * The rendering every B1 consumer uses:
 * `{ node: { controller: { grpc_port, http_port }, artifact_port, habitat: { port, port_b } },
 *    mission: { port, observation_budget_seconds },
 *    collection_url: "http://127.0.0.1:<artifact>/collect", archive_url: "http://127.0.0.1:<artifact>/archive" }`.
 */
export function renderB1Config(config: B1Config): B1Rendered {
  const artifactBase = `http://${B1_HOST}:${config.artifact_port}`;
  return {
    node: {
      controller: { grpc_port: config.controller_grpc_port, http_port: config.controller_port },
      artifact_port: config.artifact_port,
      habitat: { port: config.habitat_port, port_b: config.habitat_port_b },
    },
    mission: {
      port: config.mission_port,
      observation_budget_seconds: config.mission_observation_budget_seconds,
    },
    collection_url: `${artifactBase}/collect`,
    archive_url: `${artifactBase}/archive`,
  };
}

/**
 * Maps a job's six manifest ports, in order, to the six B1 port variables (`"b1_ports": true`).
 * Throws InvalidInputError `E_B1_CONFIG_INVALID` unless there are exactly six distinct valid ports.
 */
export function b1PortEnvironment(ports: readonly number[]): Record<string, string> {
  const issues: Issue[] = [];
  if (ports.length !== B1_PORT_VARIABLES.length) {
    issues.push({
      path: 'ports',
      rule: `must hold exactly ${B1_PORT_VARIABLES.length} ports for b1_ports, got ${ports.length}`,
    });
  }
  const seen = new Map<number, number>();
  for (const [i, port] of ports.entries()) {
    if (!Number.isInteger(port) || port < 1 || port > 65_535)
      issues.push({ path: `ports[${i}]`, rule: PORT_RULE });
    const first = seen.get(port);
    if (first !== undefined)
      issues.push({ path: `ports[${i}]`, rule: `must differ from ports[${first}] (both are ${port})` });
    else seen.set(port, i);
  }
  if (issues.length > 0) {
    throw new InvalidInputError(
      'E_B1_CONFIG_INVALID',
      'job ports cannot be injected as the B1 port variables',
      issues,
    );
  }
  return Object.fromEntries(B1_PORT_VARIABLES.map((variable, i) => [variable, String(ports[i])]));
}

/** A readable block for operators: each value with the variable it came from, then the rendering. */
export function describeB1Config(config: B1Config, budgetDefaulted: boolean): string {
  const rendered = renderB1Config(config);
  const width = Math.max(...B1_PORT_VARIABLES.map((v) => v.length), B1_BUDGET_VARIABLE.length);
  const lines = ['B1 launcher configuration: valid', ''];
  for (const variable of B1_PORT_VARIABLES)
    lines.push(`  ${variable.padEnd(width)}  ${config[CONFIG_KEY[variable]]}`);
  const budgetNote = budgetDefaulted ? ' (default)' : '';
  lines.push(
    `  ${B1_BUDGET_VARIABLE.padEnd(width)}  ${config.mission_observation_budget_seconds} s${budgetNote}`,
  );
  lines.push(
    '',
    'Rendered:',
    `  node.controller      grpc ${rendered.node.controller.grpc_port}, http ${rendered.node.controller.http_port}`,
    `  node.artifact_port   ${rendered.node.artifact_port}`,
    `  node.habitat         port ${rendered.node.habitat.port}, port_b ${rendered.node.habitat.port_b}`,
    `  mission              port ${rendered.mission.port}, observation budget ${rendered.mission.observation_budget_seconds} s`,
    `  collection_url       ${rendered.collection_url}`,
    `  archive_url          ${rendered.archive_url}`,
  );
  return lines.join('\n');
}
