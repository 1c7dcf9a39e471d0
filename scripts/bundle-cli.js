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
let oclifCommandOrderApplied = false;
const oclifCommandOrder = {
  name: 'oclif-command-order',
  transform(code, id) {
    if (!OCLIF_COMMAND_ORDER.file.test(id)) return null;
    if (!code.includes(OCLIF_COMMAND_ORDER.from)) {
      throw new Error(
        `${id}: oclif's command sort changed; see OCLIF_COMMAND_ORDER in scripts/bundle-cli.js`,
      );
    }
    oclifCommandOrderApplied = true;
    return code.replace(OCLIF_COMMAND_ORDER.from, OCLIF_COMMAND_ORDER.to);
  },
  // oclif's file moved or renamed: nothing was replaced, and the build says so instead of shipping the collator's cost.
  buildEnd(err) {
    if (err === undefined && !oclifCommandOrderApplied) {
      throw new Error(
        "oclif's command sort was not found (its plugin.js moved?): see OCLIF_COMMAND_ORDER in scripts/bundle-cli.js",
      );
    }
  },
};

/**
 * The bundle is CommonJS (issue 39): bin/run.js compiles its files with V8 data kept from an earlier run of the same
 * command (src/cli/code-cache.ts), which Node offers for a script and not for an ES module. Three things keep it what
 * the ES module bundle was:
 * - every file is strict mode, as an ES module is (`"use strict";` leads it, on its first line: line numbers stay);
 * - no file is left with an `import … from` of its own (a dynamic `import()` of a package left outside is allowed);
 * - no cycle among the chunks: a chunk required while the one requiring it is still running would see its exports
 *   half made (an ES module's bindings are live; `require`'s object is not).
 * Built-in modules are `require`d: the module's own object, never the ES module facade whose getters load what nothing
 * of ours uses (`node:process` loads 44 internal modules that way; the startup e2e test checks).
 */
const commonJs = {
  name: 'common-js-checks',
  renderChunk(code) {
    return `"use strict";${code}`;
  },
  generateBundle(_options, bundle) {
    const imports = new Map(
      Object.values(bundle)
        .filter((chunk) => chunk.type === 'chunk')
        .map((chunk) => [chunk.fileName, chunk.imports]),
    );
    const done = new Set();
    const visit = (file, path) => {
      if (path.includes(file)) {
        throw new Error(`a cycle among the bundle's chunks (${[...path, file].join(' -> ')}): see commonJs`);
      }
      if (done.has(file)) return;
      for (const next of imports.get(file) ?? []) visit(next, [...path, file]);
      done.add(file);
    };
    for (const file of imports.keys()) visit(file, []);
    for (const [file, code] of Object.values(bundle).map((c) => [c.fileName, c.code ?? ''])) {
      const left = /^(?:import|export)\b[^;\n]*from "[^"]+";$/m.exec(code);
      if (left) throw new Error(`${file}: an ES module statement left in a CommonJS chunk: ${left[0]}`);
      if (!code.startsWith('"use strict";')) throw new Error(`${file}: not strict mode`);
      const imported = /\bimport\("[^"]+"\)/.exec(code);
      if (imported) throw new Error(`${file}: ${imported[0]} left as it is (see dynamicImportInCjs)`);
    }
  },
};

const bundle = await rolldown({
  plugins: [oclifCommandOrder, commonJs],
  input: {
    ...Object.fromEntries(commands.map((file) => [file.replace(/\.js$/, ''), `${dist}${file}`])),
    execute: `${dist}execute-entry.js`,
    // bin/run.js starts `pair run`'s tool shell from here before it loads the command (issue 39): the bundle's own
    // copy, shared with the command's chunks.
    'tool-shell-spawn': `${dist}adapters/mount/tool-shell-spawn.js`,
    // …and asks the engine's facts from here (issue 39): the module the command's runtime takes them from.
    'engine-facts': `${dist}adapters/docker/engine-probe.js`,
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
    format: 'cjs',
    // A command's file exports its class as `default` (oclif takes `default`), never as the whole `module.exports`.
    exports: 'named',
    // A package left outside is `require`d where the sources `import()` it (pg, tar-stream: CommonJS): an `import()`
    // in a script compiled through vm.Script needs Node's experimental loader constant, which warns on stderr.
    dynamicImportInCjs: false,
    // Every module's source is read and decoded at every start, and V8 keeps one with a character past ASCII as a
    // two-byte string: non-ASCII escaped (messages keep their characters at run time; only a regular expression's
    // `source` is spelled with escapes) and comments left out (JSDoc would otherwise stay), a `pair run` starts about 8 %
    // sooner (docs/benchmarks.md, issue 39's sixth stop). Code stays as written, one statement a line.
    charset: 'ascii',
    comments: false,
    entryFileNames: '[name].cjs',
    chunkFileNames: 'chunks/[name]-[hash].cjs',
    // oclif and what it needs in one chunk of its own: help loads it and bin/run.js's entry, never a command's code.
    codeSplitting: { groups: [{ name: 'oclif', test: /[\\/]node_modules[\\/](?!zod[\\/])/ }] },
  });
} finally {
  await bundle.close();
}
