import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Config } from '@oclif/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BUNDLED_OCLIF,
  loadedFiles,
  LOADED_RECORD_VARIABLE,
  writeLoadRecorder,
} from '../support/loaded-files.js';

/**
 * How the CLI starts (docs/benchmarks.md, "start-up"; the times themselves are the bench's): the launcher from
 * anywhere, `--version` without oclif, help from the manifest, and a command that fails on its input without
 * loading the engine client, the logger or the archive reader. No engine needed.
 */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const LAUNCHER = join(ROOT, 'bin', 'roboguide-eval');
const RUN_JS = join(ROOT, 'bin', 'run.js');
const OUR_DIST = `${pathToFileURL(join(ROOT, 'dist')).href}/`;
let dir: string;
let hook: string;

function run(argv: string[], options: { cwd?: string; env?: Record<string, string> } = {}) {
  const r = spawnSync(argv[0]!, argv.slice(1), {
    cwd: options.cwd ?? dir,
    encoding: 'utf8',
    env: { ...process.env, ...options.env },
    timeout: 60_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** The files (not node: builtins) a `bin/run.js …` process loaded, in order. */
async function loadedBy(args: string[]): Promise<{ code: number | null; files: string[]; stderr: string }> {
  const record = join(dir, `loaded-${Math.random().toString(36).slice(2)}.txt`);
  const r = run([process.execPath, '--import', hook, RUN_JS, ...args], {
    env: { [LOADED_RECORD_VARIABLE]: record },
  });
  const files = await loadedFiles(record);
  return { code: r.code, files, stderr: r.stderr };
}

/** The engine client, the one part a command loads on first use (src/composition-root.ts, engineClient). */
const ENGINE_CLIENT = [
  '/node_modules/dockerode/',
  '/node_modules/ssh2/',
  '/node_modules/@grpc/',
  '/node_modules/protobufjs/',
];

describe('start-up: the launcher and what a command loads', () => {
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-startup-'));
    hook = await writeLoadRecorder(dir);
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('--version from the launcher, from another folder and through symlinks, prints exactly what oclif would', async () => {
    const config = await Config.load(ROOT);
    const expected = `${config.userAgent}\n`;
    expect(run([LAUNCHER, '--version']).stdout).toBe(expected);
    const links = join(dir, 'links', 'deeper');
    await mkdir(links, { recursive: true });
    await symlink(LAUNCHER, join(dir, 'links', 'roboguide-eval')); // absolute link
    await symlink('../roboguide-eval', join(links, 'rg')); // relative link to a link
    for (const argv of [
      [join(dir, 'links', 'roboguide-eval'), '--version'],
      [join(links, 'rg'), '--version'],
      ['sh', 'rg', '--version'],
    ]) {
      const r = run(argv, { cwd: links });
      expect(r.code, argv.join(' ')).toBe(0);
      expect(r.stdout, argv.join(' ')).toBe(expected);
    }
    // The launcher runs the pinned Node 24 even when the Node on PATH is another one.
    const r = run([LAUNCHER, 'b1', 'config', '--help'], { env: { PATH: '/usr/bin:/bin' } });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('b1 config');
  });

  it("keeps the bundle's code after a command's first run that succeeded, per command, and takes it on the next; help writes none", async () => {
    const xdg = join(dir, 'xdg-bundle-cache');
    const env = { XDG_CACHE_HOME: xdg };
    // Help and a failed run leave the command's key empty (their few functions would stand for the command).
    expect(run([LAUNCHER, 'e1-batch', 'schema', '--help'], { env }).code).toBe(0);
    expect(run([LAUNCHER, 'e1-batch', 'schema', '--no-such-flag'], { env }).code).not.toBe(0);
    const base = join(xdg, 'roboguide-eval', 'node-compile-cache');
    // Within Node's own folder of this Node version and these flags.
    const folder = async (): Promise<string> => {
      const versions = (await readdir(base)).filter((f) => f.startsWith('v'));
      expect(versions).toHaveLength(1);
      return join(base, versions[0]!, 'roboguide-bundle');
    };
    const stamps = async (): Promise<Record<string, number>> => {
      const at = await folder();
      if (!existsSync(at)) return {};
      const names = await readdir(at);
      return Object.fromEntries(
        await Promise.all(names.map(async (f) => [f, (await stat(join(at, f))).mtimeMs] as const)),
      );
    };
    expect(await stamps()).toEqual({});
    const first = run([LAUNCHER, 'e1-batch', 'schema'], { env });
    expect(first.code).toBe(0);
    const written = await stamps();
    // One file per bundle file the command loaded (its entry, oclif's chunk, the chunks of ours it needs).
    expect(Object.keys(written).length).toBeGreaterThan(2);
    expect(Object.keys(written).every((f) => f.startsWith('e1-batch-schema.'))).toBe(true);
    expect((await stat(await folder())).mode & 0o777).toBe(0o700);
    // The next run reads them, rewrites none and prints the same.
    const second = run([LAUNCHER, 'e1-batch', 'schema'], { env });
    expect(second.stdout).toBe(first.stdout);
    expect(await stamps()).toEqual(written);
    // NODE_DISABLE_COMPILE_CACHE turns both off.
    const off = join(dir, 'xdg-bundle-off');
    expect(
      run([LAUNCHER, 'e1-batch', 'schema'], { env: { XDG_CACHE_HOME: off, NODE_DISABLE_COMPILE_CACHE: '1' } })
        .code,
    ).toBe(0);
    expect(
      existsSync(join(off, 'roboguide-eval', 'node-compile-cache'))
        ? await readdir(join(off, 'roboguide-eval', 'node-compile-cache'))
        : [],
    ).toEqual([]);
  });

  it('ends by process.exit once nothing but stdio is left (never through an empty loop: no wait for V8, no heap teardown), with stdout and stderr pipes, and the exit code and output of the command', async () => {
    const preload = join(dir, 'record-exit.cjs');
    // 'beforeExit' recorded without a listener of its own (one would turn the early exit off).
    await writeFile(
      preload,
      [
        "const { appendFileSync } = require('node:fs');",
        'const reallyExit = process.reallyExit;',
        'process.reallyExit = function (code) { appendFileSync(process.env.RG_TEST_EXIT, `reallyExit ${code}\\n`); return reallyExit.call(this, code); };',
        'const emit = process.emit;',
        "process.emit = function (event, ...args) { if (event === 'beforeExit') appendFileSync(process.env.RG_TEST_EXIT, 'beforeExit\\n'); return emit.call(this, event, ...args); };",
        "process.on('exit', (code) => appendFileSync(process.env.RG_TEST_EXIT, `exit ${code}\\n`));",
      ].join('\n'),
    );
    for (const [args, code] of [
      [['e1-batch', 'schema'], 0],
      [['pair', 'run', '--spec', join(dir, 'no-such-spec.json')], 2],
    ] as const) {
      const record = join(dir, `exit-${code}.txt`);
      const r = run([process.execPath, '--require', preload, RUN_JS, ...args], {
        env: { RG_TEST_EXIT: record },
      });
      expect(r.code, args.join(' ')).toBe(code);
      // Through process.exit (Node's own exit by an empty loop never calls reallyExit), after the 'exit' listeners,
      // and before the loop emptied ('beforeExit' never came): stdout's and stderr's pipes (spawnSync's) keep nothing
      // alive, though Node lists them.
      expect((await readFile(record, 'utf8')).split('\n'), args.join(' ')).toEqual([
        `exit ${code}`,
        `reallyExit ${code}`,
        '',
      ]);
    }
  });

  it("loads no plugin a package.json in the user's data folder names (oclif's user plugins: code run by whoever runs a command, root included)", async () => {
    // What `plugins install` would have left ($XDG_DATA_HOME/roboguide-eval): a plugin whose init hook runs at every start.
    const data = join(dir, 'xdg-data');
    const plugin = join(data, 'roboguide-eval', 'node_modules', 'planted');
    await mkdir(plugin, { recursive: true });
    await writeFile(
      join(data, 'roboguide-eval', 'package.json'),
      JSON.stringify({
        private: true,
        oclif: { schema: 1, plugins: [{ name: 'planted', type: 'user', tag: 'latest' }] },
        dependencies: { planted: '1.0.0' },
      }),
    );
    await writeFile(
      join(plugin, 'package.json'),
      JSON.stringify({
        name: 'planted',
        version: '1.0.0',
        main: 'index.js',
        oclif: { hooks: { init: './init.js' } },
      }),
    );
    await writeFile(join(plugin, 'index.js'), 'module.exports = {};\n');
    const marker = join(dir, 'planted-ran');
    await writeFile(
      join(plugin, 'init.js'),
      `module.exports = async () => require('node:fs').writeFileSync(${JSON.stringify(marker)}, 'ran');\n`,
    );
    for (const args of [
      ['e1-batch', 'schema'],
      ['--help'],
      ['pair', 'run', '--spec', join(dir, 'none.json')],
    ]) {
      const r = run([LAUNCHER, ...args], { env: { XDG_DATA_HOME: data } });
      expect(r.code, args.join(' ')).toBe(args[0] === 'pair' ? 2 : 0);
      expect(existsSync(marker), args.join(' ')).toBe(false);
    }
  });

  it('a command that never settles still ends as Node ends it (exit 13, said), never as a success', async () => {
    // The command's promise made one that never settles (a lost promise in a command, say).
    const preload = join(dir, 'never-settles.cjs');
    await writeFile(preload, 'Promise.race = () => new Promise(() => {});\n');
    const r = run([process.execPath, '--require', preload, RUN_JS, 'e1-batch', 'schema']);
    expect(r.code).toBe(13);
    expect(r.stderr).toContain('unsettled top-level await');
  });

  it('keeps its compile cache under $XDG_CACHE_HOME (0700), and starts without one where none can be made', async () => {
    const xdg = join(dir, 'xdg-cache');
    expect(run([LAUNCHER, '--help'], { env: { XDG_CACHE_HOME: xdg } }).code).toBe(0);
    expect(await readdir(join(xdg, 'roboguide-eval', 'node-compile-cache'))).not.toEqual([]);
    expect((await stat(join(xdg, 'roboguide-eval'))).mode & 0o777).toBe(0o700);
    // A HOME where no folder can be made (Node's own recursive mkdir never returns on /proc) or that is a file.
    await writeFile(join(dir, 'home-file'), '');
    for (const home of ['/proc', join(dir, 'home-file')]) {
      for (const args of [['--version'], ['b1', 'config', '--help']]) {
        const r = run([LAUNCHER, ...args], { env: { HOME: home, XDG_CACHE_HOME: '' } });
        expect(r.code, `HOME=${home} ${args.join(' ')}`).toBe(0);
      }
    }
  });

  it('never loads a compile cache from a folder another user owns or can write, or through a link (code root runs next): it starts without one', async () => {
    const { chown, chmod: chmodFs } = await import('node:fs/promises');
    if (process.getuid?.() !== 0) return; // chown to another user needs root
    // Another user's cache base (their XDG_CACHE_HOME), a world-writable one, and our own cache level made a link.
    const theirs = join(dir, 'xdg-theirs');
    await mkdir(theirs, { mode: 0o755 });
    await chown(theirs, 65534, 65534);
    const open = join(dir, 'xdg-open');
    await mkdir(open);
    await chmodFs(open, 0o777);
    const linked = join(dir, 'xdg-linked');
    await mkdir(linked);
    await mkdir(join(dir, 'elsewhere'), { mode: 0o700 });
    await symlink(join(dir, 'elsewhere'), join(linked, 'roboguide-eval'));
    for (const xdg of [theirs, open, linked]) {
      const r = run([LAUNCHER, '--help'], { env: { XDG_CACHE_HOME: xdg } });
      expect(r.code, xdg).toBe(0);
    }
    expect(await readdir(theirs)).toEqual([]);
    expect(await readdir(open)).toEqual([]);
    expect(await readdir(join(dir, 'elsewhere'))).toEqual([]);
  });

  it('--version loads no oclif; help (root, topic, command) loads the oclif chunk and no command module', async () => {
    const version = await loadedBy(['--version']);
    expect(version.code).toBe(0);
    expect(version.files.filter((f) => f.includes('/node_modules/'))).toEqual([]);
    expect(version.files.filter((f) => f.startsWith(OUR_DIST))).toEqual([]);
    for (const args of [
      ['--help'],
      ['pair', '--help'],
      ['pair', 'run', '--help'],
      ['e1-batch', 'start', '--help'],
    ]) {
      const help = await loadedBy(args);
      expect(help.code, args.join(' ')).toBe(0);
      // Of ours only the entry and oclif's own chunk (scripts/bundle-cli.js), never a command or a module of ours.
      expect(
        help.files.filter((f) => f.startsWith(OUR_DIST) && !BUNDLED_OCLIF.test(f)),
        args.join(' '),
      ).toEqual([]);
      expect(help.files, args.join(' ')).toContain(`${OUR_DIST}bundle/execute.cjs`);
      // oclif is bundled: none of its few hundred files (nor its dependencies') is resolved from node_modules.
      expect(
        help.files.filter((f) => f.includes('/node_modules/')),
        args.join(' '),
      ).toEqual([]);
    }
  });

  it("the build records its checkout for the code version (dist/build-info.json): this package's version, a commit of this history", async () => {
    const record = JSON.parse(await readFile(join(ROOT, 'dist', 'build-info.json'), 'utf8')) as {
      version: string;
      commit: string | null;
      dirty: boolean;
    };
    const pjson = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    expect(record.version).toBe(pjson.version);
    expect(typeof record.dirty).toBe('boolean');
    expect(record.commit).toMatch(/^[0-9a-f]{40}$/);
    // Built from this checkout at HEAD or before it (a working tree may have moved on since its last build).
    expect(run(['git', '-C', ROOT, 'merge-base', '--is-ancestor', record.commit!, 'HEAD']).code).toBe(0);
  });

  it('pair run of an invalid spec: exit 2 from the bundled command without loading the engine client, nothing written', async () => {
    const spec = join(dir, 'bad-spec.json');
    await writeFile(spec, JSON.stringify({ job_id: '../escape' }));
    const before = await readdir(dir);
    const r = await loadedBy(['pair', 'run', '--spec', spec]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('job_id');
    expect(r.files).toContain(`${OUR_DIST}bundle/commands/pair/run.cjs`);
    // The bundle (npm run build): a few chunks of ours, not the few hundred modules tsc wrote.
    const ours = r.files.filter((f) => f.startsWith(OUR_DIST) && !BUNDLED_OCLIF.test(f));
    expect(ours.filter((f) => !f.startsWith(`${OUR_DIST}bundle/`))).toEqual([]);
    // rolldown splits the shared modules by which commands share them, so a new command can add a chunk: a bound
    // that says "a handful", not a count to keep (14 files at 9e33a47, 15 once this stop's commands and moves were in;
    // 20 with the tool shell's entry, which bin/run.js loads for `pair run` as root before the command).
    expect(ours.length).toBeLessThan(24);
    expect(r.files.filter((f) => ENGINE_CLIENT.some((h) => f.includes(h)))).toEqual([]);
    // The tar reader (sessions copied out) and the PostgreSQL URL parser load on first use, not at start (issue 39).
    expect(
      r.files.filter((f) =>
        ['/node_modules/tar-stream/', '/node_modules/pg-connection-string/'].some((p) => f.includes(p)),
      ),
    ).toEqual([]);
    // zod is bundled in (scripts/bundle-cli.js, issue 39): its hundred modules are not resolved one by one at start.
    expect(r.files.filter((f) => f.includes('/node_modules/zod/'))).toEqual([]);
    // oclif through its subpaths, never its index (which loads all of oclif and semver for a Node version warning).
    expect(r.files.filter((f) => f.includes('/node_modules/semver/'))).toEqual([]);
    expect(r.files.filter((f) => f.endsWith('/node_modules/@oclif/core/lib/index.js'))).toEqual([]);
    // oclif bundled (scripts/bundle-cli.js, issue 39): one chunk of ours, none of its files from node_modules.
    expect(r.files.filter((f) => f.includes('/node_modules/@oclif/core/'))).toEqual([]);
    expect(r.files.filter((f) => f.includes('/dist/bundle/chunks/oclif-'))).not.toEqual([]);
    expect((await readdir(dir)).filter((f) => !before.includes(f) && !f.startsWith('loaded-'))).toEqual([]);
  });

  it("the bundle a command loads is ASCII with no JSDoc or block comments (one-byte sources for V8; rolldown's one-line module markers stay), and its messages keep their characters", async () => {
    const bundle = join(ROOT, 'dist', 'bundle');
    const files = (await readdir(bundle, { recursive: true })).filter((f) => f.endsWith('.cjs'));
    expect(files.length).toBeGreaterThan(10);
    const offending: string[] = [];
    for (const file of files) {
      const bytes = await readFile(join(bundle, file));
      const wide = bytes.findIndex((b) => b > 0x7f);
      if (wide >= 0) offending.push(`${file}: byte ${wide} is past ASCII`);
      // JSDoc and block comments of our sources and of oclif's (a `/*` that opens a comment is followed by a blank or
      // a star; in a string or a regular expression it would be escaped or followed by something else).
      const text = bytes.toString('latin1');
      const comment = /(^|[;{}\s])\/\*[*\s!#@]/m.exec(text);
      if (comment)
        offending.push(
          `${file}: a comment at ${comment.index}: ${text.slice(comment.index, comment.index + 60)}`,
        );
    }
    expect(offending).toEqual([]);
    // An escaped message is the same string at run time: the refusal of a GPU count of 0 says "≥" as written.
    const spec = join(dir, 'zero-gpus.json');
    await writeFile(
      spec,
      JSON.stringify({
        job_id: 'a',
        argv: ['x'],
        cwd: '/tmp',
        outcome_path: '/tmp/o.json',
        image: 'x',
        gpus: 0,
      }),
    );
    const r = run([LAUNCHER, 'pair', 'run', '--spec', spec]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('gpus: a GPU count must be an integer ≥ 1');
  });

  it("built-ins without ES module facades: no chunk imports one, and a command's start loads none of what a facade's getters load", async () => {
    const bundle = join(ROOT, 'dist', 'bundle');
    const files = (await readdir(bundle, { recursive: true })).filter((f) => f.endsWith('.cjs'));
    const imports: string[] = [];
    for (const file of files) {
      const text = await readFile(join(bundle, file), 'utf8');
      for (const m of text.matchAll(/^(?:import|export)\b[^;\n]*from "(node:[^"]+)";$/gm))
        imports.push(`${file}: ${m[0]}`);
    }
    expect(imports).toEqual([]);
    // The built-in modules the process loaded (CommonJS preload, so that the recorder itself makes no facade).
    const preload = join(dir, 'record-builtins.cjs');
    await writeFile(
      preload,
      "process.on('exit', () => require('node:fs').writeFileSync(process.env.RG_TEST_BUILTINS, process.moduleLoadList.join('\\n')));\n",
    );
    const record = join(dir, 'builtins.txt');
    const spec = join(dir, 'bad-spec-builtins.json');
    await writeFile(spec, JSON.stringify({ job_id: '../escape' }));
    const r = run([process.execPath, '--require', preload, RUN_JS, 'pair', 'run', '--spec', spec], {
      env: { RG_TEST_BUILTINS: record },
    });
    expect(r.code).toBe(2);
    const loaded = (await readFile(record, 'utf8')).split('\n');
    // Loaded before by the getters of node:process, node:util and node:crypto's facades: process reports, workers, web
    // crypto, a diff algorithm for assertion messages.
    for (const unused of [
      'NativeModule internal/process/report',
      'NativeModule worker_threads',
      'NativeModule internal/crypto/webcrypto',
      'NativeModule internal/util/diff',
    ]) {
      expect(loaded).not.toContain(unused);
    }
    expect(loaded).toContain('NativeModule internal/fs/promises');
  });

  it("oclif's command list is sorted without ICU's collator, in the order localeCompare gives our ids", async () => {
    const chunks = join(ROOT, 'dist', 'bundle', 'chunks');
    const oclif = (await readdir(chunks)).filter((f) => f.startsWith('oclif-'));
    expect(oclif).toHaveLength(1);
    // Its first call in a process builds the collator (8 to 11 ms of a start): scripts/bundle-cli.js replaces oclif's sort.
    expect(await readFile(join(chunks, oclif[0]!), 'utf8')).not.toContain('localeCompare');
    const manifest = JSON.parse(await readFile(join(ROOT, 'oclif.manifest.json'), 'utf8')) as {
      commands: Record<string, unknown>;
    };
    const ids = Object.keys(manifest.commands);
    expect(ids.length).toBeGreaterThan(20);
    const byCodeUnit = [...ids].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    expect(byCodeUnit).toEqual([...ids].sort((a, b) => a.localeCompare(b)));
  });

  const oldNode = ['/usr/bin/node', '/usr/local/bin/node'].find((p) => {
    if (!existsSync(p)) return false;
    const v = spawnSync(p, ['-p', 'process.versions.node'], { encoding: 'utf8' }).stdout.trim();
    return Number(v.split('.')[0]) < 24;
  });
  it.skipIf(oldNode === undefined)(
    'the launcher without the pinned Node falls back to the node on PATH, which bin/run.js refuses plainly when older than 24',
    async () => {
      const copy = join(dir, 'no-pinned-node');
      await mkdir(join(copy, 'bin'), { recursive: true });
      await copyFile(LAUNCHER, join(copy, 'bin', 'roboguide-eval'));
      await copyFile(RUN_JS, join(copy, 'bin', 'run.js'));
      const r = run(['sh', join(copy, 'bin', 'roboguide-eval'), '--version'], {
        env: { PATH: oldNode!.replace(/\/node$/, '') },
      });
      expect(r.code).toBe(1);
      expect(r.stderr).toContain('roboguide-eval needs Node.js 24 or newer');
      // No pinned Node next to it (an install elsewhere): the fix is to install Node 24, never npx.
      expect(r.stderr).toContain(
        'Install Node.js 24 (nodejs.org, or your version manager: `nvm install 24`, `fnm install 24`) and run it again.',
      );
      expect(r.stderr).not.toContain('npx');
      expect(r.stdout).toBe('');
    },
  );
});
