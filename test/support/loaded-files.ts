import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** The variable naming the file a recorded process appends each file URL it loads to. */
export const LOADED_RECORD_VARIABLE = 'RG_TEST_LOADED';

/**
 * Writes, in `dir`, a module to preload with `node --import HOOK …`: it records every file (not `node:` builtin) the
 * process loads, by `import` or `require`, one URL per line, into the file `RG_TEST_LOADED` names. Returns HOOK.
 */
export async function writeLoadRecorder(dir: string): Promise<string> {
  const hook = join(dir, 'record-loads.mjs');
  await writeFile(
    hook,
    [
      "import { registerHooks } from 'node:module';",
      "import { appendFileSync } from 'node:fs';",
      `const out = process.env.${LOADED_RECORD_VARIABLE};`,
      "appendFileSync(out, '');",
      'registerHooks({ load(url, context, next) {',
      "  if (url.startsWith('file:')) appendFileSync(out, url + '\\n');",
      '  return next(url, context);',
      '} });',
    ].join('\n'),
  );
  return hook;
}

/** The file URLs a recorded process loaded, in order. */
export async function loadedFiles(record: string): Promise<string[]> {
  return (await readFile(record, 'utf8')).split('\n').filter((line) => line !== '');
}

/**
 * oclif as the build ships it (scripts/bundle-cli.js): the bundle's `execute` entry, oclif's chunk, and rolldown's
 * helpers they load (a file URL or path ending so).
 */
export const BUNDLED_OCLIF = /\/dist\/bundle\/(execute\.cjs|chunks\/(oclif|rolldown-runtime)-[\w-]+\.cjs)$/;
