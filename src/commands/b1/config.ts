import { BaseCommand } from '../../cli/base-command.js';
import {
  B1_BUDGET_VARIABLE,
  describeB1Config,
  parseB1Config,
  renderB1Config,
  type B1Config,
  type B1Rendered,
} from '../../core/b1-config.js';
import { InvalidInputError } from '../../core/errors.js';

export interface B1ConfigJson {
  readonly config: B1Config;
  readonly rendered: B1Rendered;
}

export default class B1ConfigCommand extends BaseCommand {
  static override summary =
    'Validate and render the B1 launcher port/budget configuration from the environment.';

  static override description =
    'Reads ROBOGUIDE_B1_CONTROLLER_GRPC_PORT, ROBOGUIDE_B1_CONTROLLER_PORT, ROBOGUIDE_B1_ARTIFACT_PORT, ' +
    'ROBOGUIDE_B1_HABITAT_PORT, ROBOGUIDE_B1_HABITAT_PORT_B and ROBOGUIDE_B1_MISSION_PORT (each a decimal integer ' +
    '1..65535, all six distinct) and ROBOGUIDE_B1_MISSION_OBSERVATION_BUDGET_SECONDS (integer 1..86400, default 1800; ' +
    'independent of provider timeouts and of the pair wall budget). Any bad value exits 2 naming the variable.\n\n' +
    'The rendering is: { node: { controller: { grpc_port, http_port }, artifact_port, habitat: { port, port_b } }, ' +
    'mission: { port, observation_budget_seconds }, collection_url: "http://127.0.0.1:<artifact>/collect", ' +
    'archive_url: "http://127.0.0.1:<artifact>/archive" }. With --json the output is { config, rendered }.';

  static override examples = [
    'ROBOGUIDE_B1_CONTROLLER_GRPC_PORT=41000 ROBOGUIDE_B1_CONTROLLER_PORT=41001 ROBOGUIDE_B1_ARTIFACT_PORT=41002 ' +
      'ROBOGUIDE_B1_HABITAT_PORT=41003 ROBOGUIDE_B1_HABITAT_PORT_B=41004 ROBOGUIDE_B1_MISSION_PORT=41005 <%= config.bin %> <%= command.id %>',
    '<%= config.bin %> <%= command.id %> --json',
  ];

  async run(): Promise<B1ConfigJson> {
    await this.parse(B1ConfigCommand);
    const parsed = parseB1Config(process.env);
    if (!parsed.ok) {
      throw new InvalidInputError(
        'E_B1_CONFIG_INVALID',
        'B1 launcher configuration is invalid',
        parsed.issues,
        {
          suggestions: ['set each ROBOGUIDE_B1_*_PORT to a distinct integer 1..65535'],
        },
      );
    }
    this.log(describeB1Config(parsed.config, process.env[B1_BUDGET_VARIABLE] === undefined));
    return { config: parsed.config, rendered: renderB1Config(parsed.config) };
  }
}
