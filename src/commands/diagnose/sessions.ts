import { resolve } from 'node:path';
import { Flags } from '@oclif/core';
import { diagnoseSessions } from '../../app/diagnose-sessions.js';
import { BaseCommand } from '../../cli/base-command.js';
import type { ProviderFailure } from '../../core/result.js';

export interface DiagnoseSessionsJson {
  readonly dir: string;
  readonly provider_failure: ProviderFailure | null;
}

export function describeFailure(failure: ProviderFailure | null): string {
  if (failure === null) return 'no provider failure found';
  const status = failure.http_status === null ? '' : ` (HTTP ${failure.http_status})`;
  return `provider failure: ${failure.kind}${status}`;
}

export default class DiagnoseSessions extends BaseCommand {
  static override description =
    'Diagnose a provider failure from Codex session files: reads the tails of the 32 newest *.jsonl files ' +
    'under --dir and reports the most recent terminal error (a hint for operators; it never changes a verdict).';

  static override examples = [
    '<%= config.bin %> <%= command.id %> --dir ~/.codex/sessions',
    '<%= config.bin %> <%= command.id %> --dir out/jobs/pair-0001/sessions --json',
  ];

  static override flags = {
    dir: Flags.string({
      required: true,
      description: 'directory holding Codex session (rollout) *.jsonl files',
    }),
  };

  async run(): Promise<DiagnoseSessionsJson> {
    const { flags } = await this.parse(DiagnoseSessions);
    const dir = resolve(flags.dir);
    const failure = await diagnoseSessions(dir, { requireDirectory: true });
    this.log(describeFailure(failure));
    return { dir, provider_failure: failure };
  }
}
