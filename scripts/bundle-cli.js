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
// @oclif/core is bundled with everything it requires (about 100 CommonJS files of it and some 40 of its dependencies:
// about 25 ms of every command's start): bin/run.js takes `execute` from the bundle's `execute` entry
// (src/execute-entry.ts), so it and the commands share the one oclif chunk (its errors and classes are the same
// objects on both sides). Its own package.json is inlined; what it reads at run time is ours (package.json, the
// manifest). TypeScript loaders it would reach only for a TypeScript plugin in development stay outside.
import { globSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { rolldown } from 'rolldown';

const dist = fileURLToPath(new URL('../dist/', import.meta.url));
const commands = globSync('commands/**/*.js', { cwd: dist });
if (commands.length === 0) throw new Error(`no commands under ${dist}commands: run tsc first`);

/** Bare specifiers bundled in (see above), with what they require in turn; any other package stays in node_modules. */
const BUNDLED_PACKAGES = ['zod', '@oclif/core'];
/** Never bundled, even when a bundled package requires it. */
const NEVER = /^(typescript|ts-node|tsx)(\/|$)/;
const bundled = (id) => BUNDLED_PACKAGES.some((name) => id === name || id.startsWith(`${name}/`));

/**
 * oclif sorts a plugin's commands with `localeCompare` at every start: the first call in a process builds ICU's
 * collator, 8 to 11 ms of a command's start on a 2-core machine (issue 39, sixth stop), and nothing else a command
 * runs needs it. Our command ids are lowercase ASCII words joined by `-` and `:`, which sort the same by code unit (the
 * startup e2e test checks every id of the manifest both ways). A change of oclif's line fails the build here.
 */
const OCLIF_COMMAND_ORDER = {
  file: /[\\/]node_modules[\\/]@oclif[\\/]core[\\/]lib[\\/]config[\\/]plugin\.js$/,
  from: '.sort((a, b) => a.id.localeCompare(b.id))',
  to: '.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))',
};
const oclifCommandOrder = {
  name: 'oclif-command-order',
  transform(code, id) {
    if (!OCLIF_COMMAND_ORDER.file.test(id)) return null;
    if (!code.includes(OCLIF_COMMAND_ORDER.from)) {
      throw new Error(
        `${id}: oclif's command sort changed; see OCLIF_COMMAND_ORDER in scripts/bundle-cli.js`,
      );
    }
    return code.replace(OCLIF_COMMAND_ORDER.from, OCLIF_COMMAND_ORDER.to);
  },
};

const bundle = await rolldown({
  plugins: [oclifCommandOrder],
  input: {
    ...Object.fromEntries(commands.map((file) => [file.replace(/\.js$/, ''), `${dist}${file}`])),
    execute: `${dist}execute-entry.js`,
  },
  platform: 'node',
  // Other packages (bare specifiers of our modules: dockerode, pino…) stay where npm put them: dockerode is loaded
  // with deferred transports (src/adapters/docker/dockerode.ts), and some packages read files next to their own
  // sources. A bare specifier inside a bundled package is bundled with it.
  external: (id, importer) =>
    /^[^./]/.test(id) && (NEVER.test(id) || (!bundled(id) && !(importer ?? '').includes('/node_modules/'))),
  logLevel: 'warn',
});
try {
  await bundle.write({
    dir: `${dist}bundle`,
    format: 'esm',
    // Every module's source is read and decoded at every start, and V8 keeps one with a character past ASCII as a
    // two-byte string: non-ASCII escaped (messages keep their characters at run time; only a regular expression's
    // `source` is spelled with escapes) and comments left out (JSDoc would otherwise stay), a `pair run` starts about 8 %
    // sooner (docs/benchmarks.md, issue 39's sixth stop). Code stays as written, one statement a line.
    charset: 'ascii',
    comments: false,
    entryFileNames: '[name].js',
    chunkFileNames: 'chunks/[name]-[hash].js',
    // oclif and what it needs in one chunk of its own: help loads it and bin/run.js's entry, never a command's code.
    codeSplitting: { groups: [{ name: 'oclif', test: /[\\/]node_modules[\\/](?!zod[\\/])/ }] },
  });
} finally {
  await bundle.close();
}
