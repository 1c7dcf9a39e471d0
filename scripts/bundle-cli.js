// The CLI's commands bundled at `npm run build` (after tsc, before `oclif manifest`): one file per command under
// dist/bundle/commands/, the modules of ours they share in a few chunks beside them, every package left to
// node_modules as installed. A command then loads a handful of files instead of a few hundred small ones, so the
// sources can import what they use at the top (docs/architecture.md, "start-up"); package.json `oclif.commands`
// points oclif at these files. dist/ as tsc wrote it stays for the library (`exports`) and bin/run.js's status
// fast path.
import { globSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { rolldown } from 'rolldown';

const dist = fileURLToPath(new URL('../dist/', import.meta.url));
const commands = globSync('commands/**/*.js', { cwd: dist });
if (commands.length === 0) throw new Error(`no commands under ${dist}commands: run tsc first`);

const bundle = await rolldown({
  input: Object.fromEntries(commands.map((file) => [file.replace(/\.js$/, ''), `${dist}${file}`])),
  platform: 'node',
  // Packages (bare specifiers: dockerode, pino, zod, @oclif/core…) stay where npm put them: oclif must share
  // @oclif/core with bin/run.js, and some packages read files next to their own sources.
  external: /^[^./]/,
  logLevel: 'warn',
});
try {
  await bundle.write({
    dir: `${dist}bundle`,
    format: 'esm',
    entryFileNames: '[name].js',
    chunkFileNames: 'chunks/[name]-[hash].js',
  });
} finally {
  await bundle.close();
}
