import { lstat } from 'node:fs/promises';
import { basename, dirname, relative, resolve, sep } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Flags } from '@oclif/core';
import { EvidenceStore } from '../../app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../adapters/fs/node-file-system.js';
import { REPORT_FILE, writeReport, type ReportTarget } from '../../app/batch/report.js';
import { BaseCommand } from '../../cli/base-command.js';
import { hostIdentity } from '../../composition-root.js';
import { InvalidInputError } from '../../core/errors.js';
import { formatDuration } from '../../core/report/format.js';
import type { ReportModel } from '../../core/report/model.js';
import { CLASSIFICATIONS } from '../../core/result.js';

/** `--out FILE`: its folder must exist and FILE must not be a folder. Checked before anything is written. */
async function targetFor(output: string, out: string | undefined): Promise<ReportTarget | undefined> {
  if (out === undefined) return undefined;
  const file = resolve(out);
  const folder = dirname(file);
  const info = await lstat(folder).catch(() => null);
  if (info === null || !info.isDirectory()) {
    throw new InvalidInputError('E_USAGE', 'invalid --out', [
      { path: '--out', rule: `its folder ${folder} must be an existing directory` },
    ]);
  }
  if ((await lstat(file).catch(() => null))?.isDirectory()) {
    throw new InvalidInputError('E_USAGE', 'invalid --out', [
      { path: '--out', rule: `${file} is a directory; name a file` },
    ]);
  }
  const up = relative(folder, output);
  return {
    store: new EvidenceStore(new NodeFileSystem(), folder),
    rel: basename(file),
    linkBase: up === '' ? '' : `${up.split(sep).map(encodeURIComponent).join('/')}/`,
  };
}

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
    output: Flags.string({ description: 'batch output directory', required: true }),
    out: Flags.string({
      description: `where to write the page (default <output>/${REPORT_FILE}); links stay relative to the batch`,
    }),
  };

  async run(): Promise<ReportModel> {
    const { flags } = await this.parse(BatchReport);
    const output = resolve(flags.output);
    const store = new EvidenceStore(new NodeFileSystem(), output);
    const target = await targetFor(output, flags.out);
    const model = await writeReport(store, new Date(), hostIdentity, target);
    const path = target ? resolve(target.store.root, target.rel) : store.resolve(REPORT_FILE);
    this.log(summaryTable(model));
    this.log(`report: ${pathToFileURL(path).href}`);
    return model;
  }
}
