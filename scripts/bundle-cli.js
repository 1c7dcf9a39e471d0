// The CLI's commands bundled at `npm run build` (after tsc, before `oclif manifest`): one file per command under
// dist/bundle/commands/, the modules of ours they share in a few chunks beside them, packages (but the few below)
// left to node_modules as installed. A command then loads a handful of files instead of a few hundred small ones, so the
// sources can import what they use at the top (docs/architecture.md, "start-up"); package.json `oclif.commands`
// points oclif at these files. dist/ as tsc wrote it stays for the library (`exports`) and bin/run.js's status
// fast path.
// Packages of many small files that need nothing beside their own code are bundled in too (issue 39): zod is about
// 100 ES modules, each resolved, read and linked at every start of a command (about 40 ms of CPU of a `pair run`'s,
// an `e1-batch start`'s and a supervisor's start-up: docs/benchmarks.md). Only what is pure JavaScript with no file
// of its own read at run time, no native part, and no instance shared with a package left outside.
import { globSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { rolldown } from 'rolldown';

const dist = fileURLToPath(new URL('../dist/', import.meta.url));
const commands = globSync('commands/**/*.js', { cwd: dist });
if (commands.length === 0) throw new Error(`no commands under ${dist}commands: run tsc first`);

/** Bare specifiers bundled in (see above); any other package stays in node_modules. */
const BUNDLED_PACKAGES = ['zod'];
const bundled = (id) => BUNDLED_PACKAGES.some((name) => id === name || id.startsWith(`${name}/`));

const bundle = await rolldown({
  input: Object.fromEntries(commands.map((file) => [file.replace(/\.js$/, ''), `${dist}${file}`])),
  platform: 'node',
  // Other packages (bare specifiers: dockerode, pino, @oclif/core…) stay where npm put them: oclif must share
  // @oclif/core with bin/run.js, dockerode is loaded with deferred transports (src/adapters/docker/dockerode.ts),
  // and some packages read files next to their own sources.
  external: (id) => /^[^./]/.test(id) && !bundled(id),
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
