import { ExitCode, RoboguideError } from '../../core/errors.js';
import { foldJournal } from '../../core/batch-state.js';
import { shellWord } from '../../core/next-steps.js';
import { EvidenceStore } from '../evidence/evidence-store.js';
import { isBatchRecord } from './layout.js';
import type { FileSystem } from '../ports/file-system.js';
import { BATCH_FILE } from '../../core/evidence-names.js';

/**
 * `e1-batch start`'s first check (issue 40): an output folder that is not new or empty is refused before the
 * manifest's per-job paths are looked at, so a reused manifest and folder get one line saying what the folder holds
 * (a batch: which one, how it ended, and the commands for it), not one `outcome_path: already exists` per job.
 * The same refusal `EvidenceStore.createOutputDir` makes later (the race between two starts stays its job).
 */
export async function refuseUsedOutput(
  fs: FileSystem,
  output: string,
  hint: { readonly bin: string; readonly typed: string },
): Promise<void> {
  let names: string[];
  try {
    const info = await fs.lstat(output);
    if (info.kind !== 'directory') names = [output];
    else names = (await fs.readdir(output)).map((e) => e.name);
  } catch {
    return; // absent (created later) or unreadable: createOutputDir says why
  }
  if (names.length === 0) return;
  const typed = shellWord(hint.typed);
  const batch = names.includes(BATCH_FILE)
    ? await new EvidenceStore(fs, output).readJson(BATCH_FILE, isBatchRecord).catch(() => null)
    : null;
  if (batch === null) {
    throw new RoboguideError('E_OUTPUT_NOT_EMPTY', `output ${output} exists and is not an empty directory`, {
      exitCode: ExitCode.invalidInput,
      context: { path: output, entries: names.slice(0, 20) },
      suggestions: ['choose a new --output directory (start never writes into a folder that holds anything)'],
    });
  }
  const ended = await new EvidenceStore(fs, output)
    .readJournal()
    .then((journal) => foldJournal(journal).exitedAs)
    .catch(() => null);
  const how = ended === null ? '' : ` (its last supervisor exited ${ended})`;
  throw new RoboguideError(
    'E_OUTPUT_NOT_EMPTY',
    `output ${output} already holds batch ${batch.batch_id}${how}: a new batch needs a new or empty --output`,
    {
      exitCode: ExitCode.invalidInput,
      context: { path: output, batch_id: batch.batch_id, ...(ended !== null ? { state: ended } : {}) },
      suggestions: [
        'choose a new --output directory for this manifest',
        `to see that batch: ${hint.bin} e1-batch report --output ${typed}`,
        ...(ended === 'drained'
          ? []
          : [`to continue that batch: ${hint.bin} e1-batch resume --output ${typed}`]),
      ],
    },
  );
}
