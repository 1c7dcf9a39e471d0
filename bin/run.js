#!/usr/bin/env node
// The tool needs Node 24 (node:sqlite and its dependencies' engines). Run directly with an older Node (the
// machine's Node 20, say), say so plainly instead of failing somewhere inside a dependency.
// Nothing above the guard may need Node 24; nothing here loads oclif before it is needed (start-up time:
// docs/benchmarks.md, "start-up").
// A git checkout (src/ next to bin/; an installed package has none) that was never installed or built: the fix is
// `npm ci && npm run build` (the pinned Node 24 comes with npm ci), not installing another Node.
{
  const { existsSync } = await builtin('node:fs');
  const { fileURLToPath } = await builtin('node:url');
  const root = fileURLToPath(new URL('..', import.meta.url));
  const step = !existsSync(`${root}src`)
    ? null
    : !existsSync(`${root}node_modules`)
      ? 'npm ci && npm run build'
      : !existsSync(`${root}dist`) && !versionOnly()
        ? 'npm run build'
        : null;
  if (step !== null) {
    const what = step.startsWith('npm ci')
      ? 'is not installed yet (no node_modules)'
      : 'is not built yet (no dist)';
    process.stderr.write(
      `roboguide-eval: this checkout (${root.replace(/\/$/, '')}) ${what}.\n` +
        `  Run in it: ${step}\n` +
        '  Or `npm run demo`: does that (and builds the synthetic images), then runs a small batch end to end.\n',
    );
    process.exit(1);
  }
}

/**
 * A built-in module as `require` gives it (`process.getBuiltinModule`, Node 22.3 and 20.16 on), never its ES module
 * facade: a facade is made by reading every export, whose getters load what nothing here needs (node:fs's streams
 * and promises: about 6 ms of a start, issue 39). An older Node (which the check below refuses) imports it.
 */
function builtin(id) {
  return process.getBuiltinModule?.(id) ?? import(id);
}

function versionOnly() {
  return ['--version', '-v'].includes(process.argv[2] ?? '');
}

const major = Number(process.versions.node.split('.')[0]);
if (major < 24) {
  // In this checkout the launcher next to this file runs the pinned Node 24 of node_modules; installed elsewhere
  // (a consumer project) there is none of ours: Node 24 must be installed.
  const { existsSync } = await import('node:fs');
  const launcher = new URL('./roboguide-eval', import.meta.url);
  const pinned = new URL('../node_modules/node/bin/node', import.meta.url);
  const { relative } = await import('node:path');
  const { fileURLToPath } = await import('node:url');
  const hint =
    existsSync(launcher) && existsSync(pinned)
      ? `  Try: ${relative(process.cwd(), fileURLToPath(launcher)) || 'roboguide-eval'} …  (the launcher of this checkout runs its pinned Node 24)\n`
      : '  Install Node.js 24 (nodejs.org, or your version manager: `nvm install 24`, `fnm install 24`) and run it again.\n';
  process.stderr.write(`roboguide-eval needs Node.js 24 or newer; this is ${process.version}.\n${hint}`);
  process.exit(1);
}
// Output into a closed pipe (`roboguide-eval --help | head -1`) is not an error of ours: the reader has what it
// wanted. EPIPE on stdout or stderr is swallowed (the stream is destroyed, later writes go nowhere) and the command
// ends as it would have (its cleanup included: a pair's container is still removed); a loop that only prints
// (status --watch) stops when stdout is gone. oclif's final flush waits for a 'drain' a closed stdout never sends:
// `outputClosed` ends that wait, so the exit code is the command's (0 for help), never Node's 13 for an unsettled
// top-level await. Any other stream error is thrown as before.
let closeOutput = () => {};
const outputClosed = new Promise((resolve) => {
  closeOutput = resolve;
});
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (err) => {
    if (err?.code !== 'EPIPE') throw err;
    if (stream === process.stdout) closeOutput();
  });
}
const nodeModule = await builtin('node:module');
const { lstatSync, mkdirSync, readFileSync } = await builtin('node:fs');
const { arch, platform, release } = await builtin('node:os');

// V8's compiled code of our modules and dependencies, kept between runs (NODE_COMPILE_CACHE or
// NODE_DISABLE_COMPILE_CACHE decide instead when set). Code only, never data; a failure just means no cache.
if (process.env.NODE_COMPILE_CACHE === undefined) {
  const cache = compileCacheDir();
  if (cache !== null) nodeModule.enableCompileCache(cache);
}

// The bundle (CommonJS) compiled with V8's code of an earlier run of the same command, functions and all
// (src/cli/code-cache.ts, issue 39), beside Node's compile cache; not for help or --version, whose few functions would
// stand for the command's. Any failure there is a start without it.
const requireHere = nodeModule.createRequire(import.meta.url);
if (!process.argv.slice(2).some((arg) => ['--help', '-h', '--version', '-v'].includes(arg))) {
  await installCodeCache();
}

// Once the command has finished and nothing is left to run, the process ends by `process.exit` (exitWhenIdle below)
// rather than by Node's way out of an empty loop, which first waits for V8's background compilations of hot functions
// (20 to 30 ms at a `pair run`'s end) and then tears the heap down page by page (6 to 9 ms): issue 39. The same exit
// code and 'exit' listeners. Not before the command has finished: an unsettled await still ends as Node ends it
// (exit 13, said), and never while another 'beforeExit' listener might still give the loop work.
let commandFinished = false;
process.on('beforeExit', function exitNow() {
  if (commandFinished && process.listeners('beforeExit').length === 1) process.exit();
});

// `pair run` as root: its tool shell (mount, umount, iptables) started now, while this process is small (a fork costs
// with the size of the process that forks: src/adapters/mount/tool-shell-spawn.ts, issue 39). The command takes it
// on its first tool request; unused, it ends with this process.
// Not for its help (`--help`, `-h`), which runs no command.
// And the engine's facts (`info`) asked now, which the engine takes 30 to 50 ms to answer while the command loads
// (src/adapters/docker/engine-probe.ts, prefetchEngineFacts): any user's `pair run`.
if (
  process.argv[2] === 'pair' &&
  process.argv[3] === 'run' &&
  !process.argv.slice(4).some((arg) => arg === '--help' || arg === '-h')
) {
  try {
    if (process.getuid?.() === 0) requireHere('../dist/bundle/tool-shell-spawn.cjs').prespawnToolShell();
    void requireHere('../dist/bundle/engine-facts.cjs').prefetchEngineFacts();
  } catch {
    // Not built as expected: the command spawns its own shell and asks the engine when it needs them.
  }
}

// `--version` answered from package.json, exactly as oclif would print it, without loading oclif (WSL, where
// oclif says "wsl" for the platform, is left to oclif).
const pjson = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
const versionFlags = ['--version', ...(pjson.oclif?.additionalVersionFlags ?? [])];
if (versionFlags.includes(process.argv[2]) && !mayBeWsl()) {
  const cpu = arch() === 'ia32' ? 'x86' : arch();
  process.stdout.write(`${pjson.name}/${pjson.version} ${platform()}-${cpu} node-${process.version}\n`);
} else if (!(
  process.argv[2] === 'e1-batch' &&
  process.argv[3] === 'status' &&
  (await statusFast(process.argv.slice(4)))
)) {
  // oclif from the bundle (src/execute-entry.ts): one chunk shared with the commands, not the hundred files of
  // node_modules/@oclif/core and its dependencies. Its entry points by subpath there too ('@oclif/core/execute',
  // '/command', '/flags', '/ux'), never its index, which loads every part of oclif and semver for a Node version
  // warning our own check above already gives (issue 39, start-up).
  // No plugins of the user's: this CLI has no `plugins` command, and oclif would load what a package.json in its data
  // folder ($XDG_DATA_HOME/roboguide-eval, ~/.local/share/roboguide-eval) names into every command, run by whoever
  // runs it (root, under a `sudo` that kept HOME): anyone's code who can write there. One file read fewer a start.
  // And the package's root given (where package.json is), not found by trying bin/package.json first.
  const { execute } = requireHere('../dist/bundle/execute.cjs');
  const { fileURLToPath } = await builtin('node:url');
  const root = fileURLToPath(new URL('..', import.meta.url)).replace(/\/$/, '');
  const loadOptions = { root, userPlugins: false, devPlugins: false };
  await Promise.race([execute({ dir: import.meta.url, loadOptions }), outputClosed]);
}
commandFinished = true;
exitWhenIdle();

/**
 * `process.exit` as soon as nothing keeps the loop alive (no handle or request of Node's own: a timer, a socket, a
 * child, a file operation), checked now and then every 2 ms by a timer that keeps nothing alive itself; when the loop
 * empties between two checks, 'beforeExit' ends it instead.
 */
function exitWhenIdle() {
  const stdio = stdioHandles();
  const check = () => {
    if (process.listeners('beforeExit').length !== 1) return;
    if (onlyStdio(process.getActiveResourcesInfo(), stdio)) process.exit();
    setTimeout(check, 2).unref();
  };
  setImmediate(check);
}

/**
 * What stdout's and stderr's own handles are listed as when they are a pipe or a socket (`| jq`, a CI runner's
 * capture, a benchmark's): a `PipeWrap` (`TCPWrap`) each, listed while the stream lives though it keeps nothing alive
 * (Node writes to them synchronously: nothing of ours is pending there). Files have no handle.
 */
function stdioHandles() {
  const kinds = [];
  for (const stream of [process.stdout, process.stderr]) {
    const name = stream.destroyed ? undefined : stream._handle?.constructor?.name;
    if (name === 'Pipe' || name === 'TCP') kinds.push(`${name}Wrap`);
  }
  return kinds;
}

/**
 * Whether the live resources are only stdio's: any terminal's (a `TTYWrap`: stdout's, stderr's, or stdin's once
 * read) and, once each, the handles of stdout and stderr (`stdio`). Any other (a socket to the engine, a child, a
 * timer, a file operation) means work is left.
 */
function onlyStdio(resources, stdio) {
  const left = [...stdio];
  return resources.every((kind) => {
    if (kind === 'TTYWrap') return true;
    const at = left.indexOf(kind);
    if (at === -1) return false;
    left.splice(at, 1);
    return true;
  });
}

async function installCodeCache() {
  const base = nodeModule.getCompileCacheDir();
  if (base === undefined) return;
  try {
    const { commandKey, installCodeCache: install } = await import('../dist/cli/code-cache.js');
    const key = commandKey(process.argv.slice(2));
    if (key === null) return;
    const { fileURLToPath } = await builtin('node:url');
    install({
      bundleDir: fileURLToPath(new URL('../dist/bundle/', import.meta.url)),
      cacheDir: `${base}/roboguide-bundle`, // within Node's own folder of this version and these flags
      key,
    });
  } catch {
    // not built as expected: the bundle loads as Node loads it
  }
}

/**
 * `e1-batch status` of a live batch answered without oclif (dist/status-entry.js: status.json plus the journal
 * tail); false, with nothing printed, when that is not the case at hand, and the command runs the full way.
 */
async function statusFast(argv) {
  let entry;
  try {
    entry = await import('../dist/status-entry.js');
  } catch {
    return false;
  }
  return entry.runStatusFast(argv);
}

function mayBeWsl() {
  if (platform() !== 'linux') return false;
  if (release().toLowerCase().includes('microsoft')) return true;
  try {
    return readFileSync('/proc/version', 'utf8').toLowerCase().includes('microsoft');
  } catch {
    return false;
  }
}

/**
 * $XDG_CACHE_HOME (absolute) or ~/.cache, then roboguide-eval/node-compile-cache, created one level at a time
 * (0700): Node's own recursive mkdir never returns where a parent cannot hold a folder (HOME=/proc), so it is
 * never asked to create one. Null when any level cannot be made, or is a link, another user's, or writable by others.
 */
function compileCacheDir() {
  const xdg = process.env.XDG_CACHE_HOME ?? '';
  const home = process.env.HOME ?? '';
  const base = xdg.startsWith('/') ? xdg : home.startsWith('/') ? `${home}/.cache` : null;
  if (base === null) return null;
  const levels = [base, `${base}/roboguide-eval`, `${base}/roboguide-eval/node-compile-cache`];
  const euid = process.geteuid?.() ?? -1;
  for (const dir of levels) {
    try {
      mkdirSync(dir, { mode: 0o700 });
    } catch (err) {
      if (err?.code !== 'EEXIST') return null;
    }
    // Code root runs next time: only from folders that are ours and no one else can write (never a link, never
    // another user's: docs/secrets.md). The base may be read by others; our own two levels are private.
    let info;
    try {
      info = lstatSync(dir);
    } catch {
      return null;
    }
    const others = dir === base ? 0o022 : 0o077;
    if (!info.isDirectory() || info.uid !== euid || (info.mode & others) !== 0) return null;
  }
  return levels[levels.length - 1];
}
