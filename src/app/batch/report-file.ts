import { basename, dirname, relative, resolve, sep } from 'node:path';
import { InvalidInputError } from '../../core/errors.js';
import type { ReportModel } from '../../core/report/types.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { HostIdentity } from '../ports/host-identity.js';
import type { FileSystem } from '../ports/file-system.js';
import { writeReport, type ReportTarget } from './report.js';
import { REPORT_FILE } from '../../core/evidence-names.js';

export interface ReportFileDeps {
  readonly fs: Pick<FileSystem, 'lstat'>;
  /** Whether the batch's supervisor still lives (the report says running or stopped). */
  readonly host: Pick<HostIdentity, 'isAlive'>;
  /** An evidence store rooted at `dir` (the batch, or the folder of `--out`). */
  readonly storeAt: (dir: string) => EvidenceStore;
  /** The batch's pinned tags that moved since start, one line each (asked of the engine; none without one). */
  readonly imagesMoved?: (output: string) => Promise<readonly string[]>;
}

async function isDirectory(fs: ReportFileDeps['fs'], path: string): Promise<boolean | null> {
  return fs.lstat(path).then(
    (info) => info.kind === 'directory',
    () => null,
  );
}

/** `--out FILE`: its folder must exist and FILE must not be a folder. Checked before anything is written. */
export async function reportTarget(deps: ReportFileDeps, output: string, out: string): Promise<ReportTarget> {
  const file = resolve(out);
  const folder = dirname(file);
  if ((await isDirectory(deps.fs, folder)) !== true) {
    throw new InvalidInputError('E_USAGE', 'invalid --out', [
      { path: '--out', rule: `its folder ${folder} must be an existing directory` },
    ]);
  }
  if ((await isDirectory(deps.fs, file)) === true) {
    throw new InvalidInputError('E_USAGE', 'invalid --out', [
      { path: '--out', rule: `${file} is a directory; name a file` },
    ]);
  }
  const up = relative(folder, output);
  return {
    store: deps.storeAt(folder),
    rel: basename(file),
    linkBase: up === '' ? '' : `${up.split(sep).map(encodeURIComponent).join('/')}/`,
  };
}

/** `e1-batch report`: write the page (to `<output>/report.html`, or `out`) and say where it went. */
export async function writeReportFile(
  deps: ReportFileDeps,
  request: { readonly output: string; readonly out?: string; readonly now: Date },
): Promise<{ readonly model: ReportModel; readonly path: string }> {
  const store = deps.storeAt(request.output);
  const target =
    request.out === undefined ? undefined : await reportTarget(deps, request.output, request.out);
  const model = await writeReport(store, request.now, deps.host, target, deps.imagesMoved);
  const path = target ? resolve(target.store.root, target.rel) : store.resolve(REPORT_FILE);
  return { model, path };
}
