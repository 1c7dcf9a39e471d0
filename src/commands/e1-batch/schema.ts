import { BaseCommand } from '../../cli/base-command.js';
import { MANIFEST_SCHEMA_ID } from '../../core/manifest/constants.js';
import { manifestJsonSchema } from '../../core/manifest/json-schema.js';

export default class E1BatchSchema extends BaseCommand {
  static override summary = `Print the JSON Schema of the batch manifest (${MANIFEST_SCHEMA_ID}).`;

  static override description =
    'Prints the JSON Schema (draft 2020-12) of the manifest that `e1-batch start --manifest` accepts. ' +
    'Fields with defaults are optional. Some rules are checked by the tool but cannot be expressed in ' +
    'JSON Schema: unique job ids and outcome paths, ports disjoint across all jobs, every job having an ' +
    'image (its own or the top-level default), secret-looking environment names holding only "${NAME}" ' +
    'references, credential-like source_sha256 paths, and the GPU capacity fields required when max_workers is 2 and the batch uses GPUs.';

  static override examples = [
    '<%= config.bin %> <%= command.id %> > manifest.schema.json',
    '<%= config.bin %> <%= command.id %> --json',
  ];

  async run(): Promise<Record<string, unknown>> {
    await this.parse(E1BatchSchema);
    const schema = manifestJsonSchema();
    this.log(JSON.stringify(schema, null, 2));
    return schema;
  }
}
