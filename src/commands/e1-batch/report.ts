import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as Flags from '@oclif/core/flags';
import { REPORT_FILE } from '../../core/evidence-names.js';
import { writeReportFile } from '../../app/batch/report-file.js';
import { BaseCommand } from '../../cli/base-command.js';
import { batchOutputFlag } from '../../cli/flags.js';
import { createReportFileDeps } from '../../command-root.js';
import { formatDuration } from '../../core/report/format.js';
import type { ReportModel } from '../../core/report/types.js';
import { CLASSIFICATIONS } from '../../core/result.js';

const TABLE_MAX_ROWS = 30;

/** A few lines for a terminal: the counts, and one row per pair for a small batch. */
export function summaryTable(m: ReportModel): string {
  const c = m.counts;
  const lines = [
    `batch ${m.batch_id}  ${m.state.toUpperCase()}  ${c.total - c.pending - c.claimed}/${c.total} finished  elapsed ${formatDuration(m.elapsed_sec)}`,
  ];
  const counted = CLASSIFICATIONS.filter((k) => c[k] > 0).map((k) => `${k} ${c[k]}`);
  if (counted.length) lines.push(counted.join('  '));
  if (m.pause_reasons.length) lines.push(`paused: ${m.pause_reasons.join(', ')}`);
  for (const c of m.pause_causes ?? []) lines.push(`  ${c.reason}: ${c.code}: ${c.message}`);
  const egress = m.pairs.flatMap((p) => (p.egress !== undefined ? [p.egress] : []));
  if (egress.length > 0)
    lines.push(
      `egress: ${egress.reduce((n, e) => n + e.refused, 0)} refused, ${egress.reduce((n, e) => n + e.allowed, 0)} allowed over ${egress.length} allowlisted pairs`,
    );
  if (m.pairs.length <= TABLE_MAX_ROWS) {
    const rows = m.pairs.map((p) => [
      p.job_id,
      p.classification ?? p.status,
      formatDuration(p.duration_sec),
      p.reasons.join(', '),
    ]);
    const all = [['pair', 'classification', 'duration', 'reasons'], ...rows];
    const widths = [0, 1, 2].map((i) => Math.max(...all.map((r) => r[i]!.length)));
    lines.push(
      '',
      ...all.map((r) =>
        r
          .map((cell, i) => (i < 3 ? cell.padEnd(widths[i]!) : cell))
          .join('  ')
          .trimEnd(),
      ),
    );
  }
  return lines.join('\n');
}

export default class BatchReport extends BaseCommand {
  static override summary =
    'Write a self-contained HTML report of a batch (timeline, GPU, pairs with their evidence).';
  static override description =
    "Built only from the batch's redacted evidence (events.jsonl, receipts, results): header with state, pauses, counts, " +
    'elapsed time and ETA; a timeline of every pair by worker slot; measured GPU peaks against the budget rule; a ' +
    'sortable table of pairs with relative links to stdout.log, stderr.log and result.json. One HTML file, no network. ' +
    'The supervisor refreshes <output>/report.html by itself as the batch moves; this command writes it on demand. ' +
    'With --json the same data is printed as JSON.';
  static override examples = [
    '<%= config.bin %> e1-batch report --output ./batch',
    '<%= config.bin %> e1-batch report --output ./batch --out /tmp/batch-report.html',
    '<%= config.bin %> e1-batch report --output ./batch --json',
  ];
  static override flags = {
    output: batchOutputFlag,
    out: Flags.string({
      description: `where to write the page (default <output>/${REPORT_FILE}); links stay relative to the batch`,
    }),
  };

  async run(): Promise<ReportModel> {
    const { flags } = await this.parse(BatchReport);
    const request = {
      output: resolve(flags.output),
      ...(flags.out !== undefined ? { out: flags.out } : {}),
      now: new Date(),
    };
    const { model, path } = await writeReportFile(createReportFileDeps(), request);
    this.log(summaryTable(model));
    this.log(`report: ${pathToFileURL(path).href}`);
    return model;
  }
}
