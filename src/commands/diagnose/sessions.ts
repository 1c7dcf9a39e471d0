import { resolve } from 'node:path';
import * as Flags from '@oclif/core/flags';
import { diagnoseSessionsReport } from '../../app/diagnose-sessions.js';
import type { SessionsReport } from '../../app/diagnose-sessions.js';
import { BaseCommand } from '../../cli/base-command.js';
import { createDiagnoseSessionsWiring } from '../../command-root.js';
import type { ProviderFailure } from '../../core/result.js';

export interface DiagnoseSessionsJson extends SessionsReport {
  readonly dir: string;
}

export function describeFailure(failure: ProviderFailure | null): string {
  if (failure === null) return 'no provider failure found';
  const status = failure.http_status === null ? '' : ` (HTTP ${failure.http_status})`;
  return `provider failure: ${failure.kind}${status}`;
}

/** The human lines: the diagnosis, then what it rests on (so "nothing recorded" is never read as "succeeded"). */
export function describeReport(report: SessionsReport): string[] {
  const lines: string[] = [];
  if (report.provider_failure !== null) lines.push(describeFailure(report.provider_failure));
  else if (report.turn_end_found)
    lines.push('no structured failure found: the newest turn ended without a recorded provider failure');
  else lines.push('no structured failure found: no turn end or error was recorded in the session files read');
  const turnEnds = report.turn_end_found ? 'a turn end was found' : 'no turn end was found';
  lines.push(`read ${report.files_read} session file(s), ${report.lines_read} line(s); ${turnEnds}`);
  if (report.files_unreadable > 0) {
    const zstd = report.zstd_available ? '' : ' (this Node cannot decompress .jsonl.zst)';
    lines.push(`${report.files_unreadable} session file(s) could not be read or decompressed${zstd}`);
  }
  return lines;
}

export default class DiagnoseSessions extends BaseCommand {
  static override description =
    'Diagnose a provider failure from Codex session files: reads the tails of the 32 newest *.jsonl (or *.jsonl.zst) ' +
    'files under --dir and reports the failure of the newest turn (a hint for operators; it never changes a verdict).';

  static override examples = [
    '<%= config.bin %> <%= command.id %> --dir ~/.codex/sessions',
    '<%= config.bin %> <%= command.id %> --dir out/jobs/pair-0001/sessions --json',
  ];

  static override flags = {
    dir: Flags.string({
      required: true,
      description: 'directory holding Codex session (rollout) *.jsonl / *.jsonl.zst files',
    }),
  };

  async run(): Promise<DiagnoseSessionsJson> {
    const { flags } = await this.parse(DiagnoseSessions);
    const dir = resolve(flags.dir);
    const report = await diagnoseSessionsReport(await createDiagnoseSessionsWiring(), dir, {
      requireDirectory: true,
    });
    for (const line of describeReport(report)) this.log(line);
    return { dir, ...report };
  }
}
