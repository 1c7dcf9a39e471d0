// Moves files with `git mv` and rewrites every reference to them (issue 44: "app/pair/ for the pair engine", "tests
// mirror the source tree"). Re-runnable on any later tree: the moves come from rules read off the files present, and a
// second run finds nothing to move and changes nothing.
//
// Usage: node scripts/move-files.js --rules [--dry-run]           the rules below (pair engine, unit tests)
//        node scripts/move-files.js [--dry-run] OLD NEW [OLD NEW …]  explicit moves, files or whole folders
//        node scripts/move-files.js --check                       every relative import resolves, docs' paths exist
//
// What it rewrites, in every git-visible file of src/, test/, bench/, scripts/, clients/ and the root configs:
// - relative module specifiers (`from '…'`, `import('…')`, `import '…'`, `vi.mock('…')`, `vi.importActual('…')`,
//   `require('…')`), also those reaching src through dist/ (`../../dist/app/x.js`), keeping each one's extension style;
// - paths anchored at the file: `new URL('…', import.meta.url)`, `join|resolve(import.meta.dirname, '…', …)`;
// - exact mentions of a moved file's path anywhere else (docs/*.md, README.md, comments, strings, package.json,
//   tsconfig*, vitest and eslint configs, .ci/run): `src/app/x.ts`, `app/x.ts`, `src/app/x.js`, `dist/app/x.js`, …
// It refuses, changing nothing, when a target exists or a relative path names nothing; then runs prettier over what it
// changed and checks the tree again. What it cannot rewrite (other uses of import.meta in a moved file, a glob whose
// matches change) it lists as notes.
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import { posix } from 'node:path';
import ts from 'typescript';

const root = execFileSync('git', ['rev-parse', '--show-toplevel'], { encoding: 'utf8' }).trim();
const abs = (p) => posix.join(root, p);
const git = (...args) => execFileSync('git', args, { cwd: root, encoding: 'utf8', maxBuffer: 1 << 28 });

/**
 * The pair engine (one pair's life: admit-time checks aside, its container, logs, network and egress, mounts, disk,
 * collection, removal, result, reconciliation and recovery, `pair run`): a file directly in src/app/ whose name
 * (without `.ts`) matches one of these moves to src/app/pair/. Files already under src/app/pair/ stay where they are.
 */
const PAIR_ENGINE = [
  /(^|-)pair(-|$)/, // the name says so: pair-lifecycle, pair-logs, run-pair, execute-pair-types, recover-pair-run …
  /^(reconcile|recover)-/, // terminal reconciliation (commit, output) and `pair recover` (output)
  /^(build-result|disk-watch|engine-return|mount-guard|remove-and-verify)$/, // result.json, the running pair's disk,
  // its container after an engine restart, the launch-time mount check, the verified removal
];
/**
 * Names that never move although a pattern matches. Left in src/app/ by the patterns, shared as much with serve's
 * sessions (mount-stage, mount-walk, egress-log) or batches and capacity commands (admission, job-paths,
 * durable-write, digest, existing-evidence, release-lost-slot) as with a pair.
 */
const NOT_PAIR_ENGINE = new Set([]);

const CODE = /\.(ts|mts|cts|js|mjs|cjs)$/;
const SCOPE = /^(src|test|bench|scripts|clients|docs|\.ci)\/|^[^/]+\.(md|json|js|ts|cjs|mjs)$/;
const SKIP = /^test\/fixtures\/|^docs\/(openapi|manifest\.schema)\.json$|^package-lock\.json$/;

const listFiles = () =>
  git('ls-files', '-z', '--cached', '--others', '--exclude-standard')
    .split('\0')
    .filter((p) => p && fs.existsSync(abs(p)) && fs.statSync(abs(p)).isFile());

/** Text files this script reads and may rewrite. */
function scopeFiles(all) {
  return all.filter((p) => {
    if (!SCOPE.test(p) || SKIP.test(p)) return false;
    const head = fs.readFileSync(abs(p)).subarray(0, 8192);
    return !head.includes(0);
  });
}

// ---- the moves --------------------------------------------------------------------------------------------------

function ruleMoves(all, refsOf) {
  const moves = new Map();
  for (const p of all) {
    const m = /^src\/app\/([^/]+)\.ts$/.exec(p);
    if (m && !NOT_PAIR_ENGINE.has(m[1]) && PAIR_ENGINE.some((re) => re.test(m[1])))
      moves.set(p, `src/app/pair/${m[1]}.ts`);
  }
  // A unit test X.test.ts goes beside where its source X.ts will be once the moves above are made: the src file of that
  // name the test imports, else the one next to a file it imports (it tests X through its caller); none or several: stays.
  const sources = new Map();
  for (const p of all) {
    const m = /^src\/(?:.+\/)?([^/]+)\.ts$/.exec(p);
    if (m && !p.endsWith('.d.ts')) sources.set(m[1], [...(sources.get(m[1]) ?? []), p]);
  }
  const stayed = [];
  for (const p of all) {
    const m = /^test\/unit\/(?:.+\/)?([^/]+)\.test\.ts$/.exec(p);
    if (!m) continue;
    const named = sources.get(m[1]) ?? [];
    const imported = (refsOf.get(p)?.refs ?? []).map((r) => r.target?.real).filter(Boolean);
    let found = named.filter((s) => imported.includes(s));
    if (found.length === 0)
      found = named.filter((s) => imported.some((i) => posix.dirname(i) === posix.dirname(s)));
    const mirror = (s) =>
      posix.join('test/unit', posix.dirname((moves.get(s) ?? s).slice(4)), `${m[1]}.test.ts`);
    if (found.length === 1 && mirror(found[0]) !== p) moves.set(p, mirror(found[0]));
    if (found.length === 1 || named.some((s) => mirror(s) === p)) continue; // beside its source already
    const why =
      named.length === 0
        ? `no src/**/${m[1]}.ts`
        : `imports ${found.length === 0 ? 'nothing from the folder of' : 'several of'} ${(found.length ? found : named).join(', ')}`;
    stayed.push(`${p}  (${why})`);
  }
  return { moves, stayed };
}

function explicitMoves(pairs, all) {
  const moves = new Map();
  for (let i = 0; i < pairs.length; i += 2) {
    const [from, to] = [pairs[i], pairs[i + 1]].map((p) => posix.normalize(p).replace(/\/$/, ''));
    const inside = all.filter((p) => p.startsWith(`${from}/`));
    if (all.includes(from)) moves.set(from, to);
    else if (inside.length > 0) for (const p of inside) moves.set(p, `${to}/${p.slice(from.length + 1)}`);
    else if (!fs.existsSync(abs(to)))
      fail(`${from}: no such file or folder (and ${to} does not exist either)`);
    // else: already moved, nothing to do
  }
  return moves;
}

function fail(message, list = []) {
  console.error(`move-files: ${message}${list.map((l) => `\n  ${l}`).join('')}`);
  process.exit(1);
}

// ---- references -------------------------------------------------------------------------------------------------

const RELATIVE = /^\.\.?(\/|$)/;
const MODULE_CALLS = /^(require|(vi|vitest)\.(mock|doMock|unmock|doUnmock|importActual|importMock))$/;
const isText = (node) => node && (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node));

/**
 * The path strings of one code file, read with the TypeScript parser (so a path inside a string or a comment is not
 * taken for an import): module specifiers of imports, exports, `import()`, `import('…')` types, `require`, `vi.mock`
 * and its kin; `new URL('…', import.meta.url)`; `join|resolve(import.meta.dirname, '…', …)` (`joined`: its strings).
 */
function pathStrings(file, text) {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const found = [];
  const visit = (node) => {
    let lit;
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && isText(node.moduleSpecifier))
      lit = node.moduleSpecifier;
    else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) lit = node.argument.literal;
    else if (ts.isCallExpression(node)) {
      const callee = node.expression.getText(sf);
      const module = node.expression.kind === ts.SyntaxKind.ImportKeyword || MODULE_CALLS.test(callee);
      if (module && isText(node.arguments[0])) lit = node.arguments[0];
      const rest = node.arguments.slice(1);
      const anchored = /^(path\.)?(join|resolve)$/.test(callee) && rest.length > 0 && rest.every(isText);
      if (anchored && node.arguments[0].getText(sf) === 'import.meta.dirname') {
        const start = rest[0].getStart(sf);
        const spec = posix.join(...rest.map((a) => a.text));
        found.push({ start, end: rest.at(-1).end, spec, joined: rest.map((a) => a.getText(sf)[0]) });
      }
    } else if (
      ts.isNewExpression(node) &&
      node.expression.getText(sf) === 'URL' &&
      node.arguments?.length === 2
    )
      if (node.arguments[1].getText(sf) === 'import.meta.url' && isText(node.arguments[0]))
        lit = node.arguments[0];
    if (lit && RELATIVE.test(lit.text))
      found.push({ start: lit.getStart(sf) + 1, end: lit.end - 1, spec: lit.text });
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return found;
}

const lineOf = (text, index) => text.slice(0, index).split('\n').length;

/**
 * What a written path names: the file itself, the .ts of a .js, the src/ file of a dist/ one, or an index. `real`: the
 * repo path that exists; `realTail`/`tail`: where the written path differs from it (its extension style), kept when
 * `real` moves. A dist/ path with no src/ file behind it (a bundle, a generated file) is taken as written.
 */
function resolveTarget(target, exists) {
  if (target.startsWith('..')) return undefined;
  const inDist = target.startsWith('dist/');
  const base = inDist ? `src/${target.slice('dist/'.length)}` : target;
  const candidates = [
    base.replace(/\.d\.ts$/, '.ts'),
    base.replace(/\.([mc]?)js$/, '.$1ts'),
    base,
    `${base}.ts`,
    `${base}/index.ts`,
  ];
  const real = candidates.find((c) => exists(c));
  if (!real) return inDist ? { real: target, realTail: '', tail: '', inDist: false } : undefined;
  let common = 0;
  while (common < real.length && real[common] === base[common]) common++;
  return { real, realTail: real.slice(common), tail: base.slice(common), inDist };
}

/** Where `resolved` points once `real` is at `moved`, in the specifier's style. */
function rewriteTarget(resolved, moved) {
  if (!moved.endsWith(resolved.realTail))
    fail(`cannot keep the style of a reference to ${resolved.real} → ${moved}`);
  const base = moved.slice(0, moved.length - resolved.realTail.length) + resolved.tail;
  return resolved.inDist ? `dist/${base.slice('src/'.length)}` : base;
}

function relativeSpec(fromFile, target, original) {
  let rel = posix.relative(abs(posix.dirname(fromFile)), abs(target)) || '.';
  if (original.startsWith('.') && !rel.startsWith('.')) rel = `./${rel}`;
  if (original.endsWith('/') && !rel.endsWith('/')) rel += '/';
  return rel;
}

/** Every path reference in one code file: where its characters are, what it names (`path`) and what exists there. */
function referencesOf(file, text, exists) {
  return pathStrings(file, text).map((ref) => {
    const path = posix.normalize(posix.join(posix.dirname(file), ref.spec)).replace(/\/$/, '');
    return { ...ref, line: lineOf(text, ref.start), path, target: resolveTarget(path, exists) };
  });
}

/** The new text of a reference from `file` (at `movedFile` after the moves), or undefined when it stays as written. */
function replacementOf(ref, file, movedFile, moves) {
  const moved = moves.get(ref.target.real);
  if (!moved && movedFile === file) return undefined;
  const spec = relativeSpec(movedFile, moved ? rewriteTarget(ref.target, moved) : ref.path, ref.spec);
  if (!ref.joined) return spec === ref.spec ? undefined : spec;
  const parts = ref.joined.length > 1 ? spec.split('/').filter(Boolean) : [spec];
  return parts.map((p) => ref.joined[0] + p + ref.joined[0]).join(', ');
}

/** Exact mentions of moved files: every spelling of each old path (src/ and dist/, .ts and .js, from src/ or not). */
function mentionTable(moves) {
  const table = new Map();
  for (const [from, to] of moves) {
    table.set(from, to);
    const [a, b] = [/^src\/(.+)\.ts$/.exec(from)?.[1], /^src\/(.+)\.ts$/.exec(to)?.[1]];
    if (!a || !b) continue;
    table.set(`src/${a}.js`, `src/${b}.js`);
    table.set(`dist/${a}.js`, `dist/${b}.js`);
    table.set(`dist/${a}.d.ts`, `dist/${b}.d.ts`);
    if (a.includes('/')) (table.set(`${a}.ts`, `${b}.ts`), table.set(`${a}.js`, `${b}.js`));
  }
  const keys = [...table.keys()].sort((x, y) => y.length - x.length);
  const alternatives = keys.map((k) => k.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')).join('|');
  const pattern = new RegExp(`(?<![\\w@.\\/-])(?:\\./)?(${alternatives})(?![\\w\\/-]|\\.\\w)`, 'g');
  return keys.length === 0 ? undefined : { table, pattern };
}

/**
 * Paths cited in backquotes by docs/*.md and README.md that exist now: file → Set. A cited path that does not exist is
 * an error in the docs that follow the code (STRICT_DOCS); the others also cite plans and other projects' paths.
 */
const CITED =
  /`((?:src|test|scripts|bench|docs|clients|docker|bin|app|core|adapters|commands|cli|testing)\/[^`\s*<>…]*)`/g;
function docMentions(files, exists) {
  const present = new Map();
  for (const file of files.filter((p) => /^docs\/[^/]+\.md$|^README\.md$/.test(p))) {
    const found = new Set();
    for (const m of fs.readFileSync(abs(file), 'utf8').matchAll(CITED)) {
      const p = m[1].replace(/:\d+(-\d+)?$/, '').replace(/\/$/, '');
      if (exists(p) || exists(`src/${p}`)) found.add(p);
      else if (STRICT_DOCS.has(file)) missingCited.push(`${file}: ${m[1]}`);
    }
    present.set(file, found);
  }
  return present;
}
const missingCited = [];
const STRICT_DOCS = new Set(['docs/architecture.md', 'README.md', 'docs/spec.md']);

const globRegExp = (glob) => {
  const escaped = glob
    .replace(/[.+?^${}()|[\]\\]/g, '\\$&')
    .replaceAll('**/', '\0')
    .replaceAll('*', '[^/]*');
  return new RegExp(`^${escaped.replaceAll('\0', '(.+/)?')}$`);
};

/** Text edits [start, end, text] applied from the end, so earlier offsets stay valid. */
function applyEdits(text, edits) {
  const sorted = edits.sort((x, y) => y[0] - x[0]);
  return sorted.reduce((out, [start, end, repl]) => out.slice(0, start) + repl + out.slice(end), text);
}

function removeEmptyFolders(from) {
  const empty = (dir) => dir !== '.' && fs.existsSync(abs(dir)) && fs.readdirSync(abs(dir)).length === 0;
  for (let dir = posix.dirname(from); empty(dir); dir = posix.dirname(dir)) fs.rmdirSync(abs(dir));
}

// ---- the run ----------------------------------------------------------------------------------------------------

const args = process.argv.slice(2);
const dryRun = args.includes('--dry-run');
const started = Date.now();

function scan() {
  const all = listFiles();
  const allSet = new Set(all);
  const exists = (p) => allSet.has(p) || (!p.startsWith('node_modules') && fs.existsSync(abs(p)));
  const files = scopeFiles(all);
  const refsOf = new Map();
  const unresolved = [];
  for (const file of files.filter((p) => CODE.test(p))) {
    const text = fs.readFileSync(abs(file), 'utf8');
    const refs = referencesOf(file, text, exists);
    refsOf.set(file, { text, refs });
    for (const r of refs) if (!r.target) unresolved.push(`${file}:${r.line}  '${r.spec}'`);
  }
  return { all, files, refsOf, unresolved, docs: docMentions(files, exists) };
}

const before = scan();
if (before.unresolved.length > 0)
  fail('these relative paths name nothing; fix them first (nothing was changed):', before.unresolved);
const references = [...before.refsOf.values()].reduce((n, f) => n + f.refs.length, 0);
if (args.includes('--check')) {
  const cited = before.docs.get('docs/architecture.md')?.size ?? 0;
  console.log(`${references} relative paths in ${before.refsOf.size} files: all resolve`);
  console.log(`docs/architecture.md cites ${cited} paths that exist; missing in ${[...STRICT_DOCS]}:`);
  console.log(missingCited.length === 0 ? '  none' : `  ${missingCited.join('\n  ')}`);
  process.exit(missingCited.length > 0 ? 1 : 0);
}

const explicit = args.filter((a) => !a.startsWith('--'));
if (explicit.length % 2 !== 0) fail('give explicit moves as OLD NEW pairs');
const { moves, stayed } = args.includes('--rules')
  ? ruleMoves(before.all, before.refsOf)
  : { moves: new Map(), stayed: [] };
for (const [from, to] of explicitMoves(explicit, before.all)) moves.set(from, to);

const targets = new Map();
for (const [from, to] of moves) {
  if (targets.has(to)) fail(`${from} and ${targets.get(to)} would both move to ${to}; nothing was changed`);
  targets.set(to, from);
  if (fs.existsSync(abs(to)) && !moves.has(to))
    fail(`${to} exists: refusing to move ${from} over it; nothing was changed`);
}
const count = (dir) => [...moves.keys()].filter((f) => f.startsWith(dir)).length;
console.log(`moves: ${count('src/')} under src/, ${count('test/')} under test/, ${moves.size} in all`);
for (const [from, to] of moves) console.log(`  ${from} → ${to}`);
if (stayed.length > 0)
  console.log(`unit tests left in place (${stayed.length}): no single src file of their name they test`);
for (const s of stayed) console.log(`  ${s}`);
if (dryRun || moves.size === 0) process.exit(0);

// New texts, computed from the tree before anything moves.
const mentions = mentionTable(moves);
const newText = new Map();
const notes = [];
let rewrittenRefs = 0;
let rewrittenMentions = 0;
for (const file of before.files) {
  const movedFile = moves.get(file) ?? file;
  const entry = before.refsOf.get(file);
  const text = entry?.text ?? fs.readFileSync(abs(file), 'utf8');
  const edits = [];
  for (const ref of entry?.refs ?? []) {
    const repl = replacementOf(ref, file, movedFile, moves);
    if (repl !== undefined) (edits.push([ref.start, ref.end, repl]), rewrittenRefs++);
  }
  const taken = entry?.refs ?? [];
  for (const m of mentions ? text.matchAll(mentions.pattern) : []) {
    const start = m.index + m[0].length - m[1].length;
    if (taken.some((r) => start < r.end && r.start < start + m[1].length)) continue;
    edits.push([start, start + m[1].length, mentions.table.get(m[1])]);
    rewrittenMentions++;
  }
  if (movedFile !== file && CODE.test(file))
    for (const m of text.matchAll(/import\.meta\.(url|dirname|filename)/g))
      if (!taken.some((r) => m.index >= r.start - 80 && m.index <= r.end + 40))
        notes.push(`${movedFile}:${lineOf(text, m.index)}  import.meta.${m[1]} left as it was`);
  for (const m of text.matchAll(/[\w./-]*\/[\w./-]*\*[\w.*/-]*/g)) {
    const glob = globRegExp(m[0]);
    if ([...moves].some(([from, to]) => glob.test(from) !== glob.test(to)))
      notes.push(`${file}:${lineOf(text, m.index)}  ${m[0]} matches a moved file before or after, not both`);
  }
  if (edits.length > 0) newText.set(movedFile, applyEdits(text, edits));
}

const tracked = new Set(git('ls-files', '-z').split('\0'));
for (const [from, to] of moves) {
  fs.mkdirSync(abs(posix.dirname(to)), { recursive: true });
  if (tracked.has(from)) git('mv', from, to);
  else fs.renameSync(abs(from), abs(to));
  removeEmptyFolders(from);
}
for (const [file, text] of newText) fs.writeFileSync(abs(file), text);

const prettier = abs('node_modules/.bin/prettier');
const pretty = [...newText.keys()].filter((p) => /\.(ts|js|mjs|cjs|json|md)$/.test(p));
const format = ['--write', '--log-level', 'warn', '--ignore-unknown', ...pretty];
if (pretty.length > 0 && !fs.existsSync(prettier)) notes.push('no prettier here: format the rewritten files');
else if (pretty.length > 0) execFileSync(prettier, format, { cwd: root, stdio: 'inherit' });

const after = scan();
const lost = [];
for (const [file, found] of before.docs)
  for (const p of found)
    if (!after.docs.get(file)?.has(mentions.table.get(p) ?? p)) lost.push(`${file}: ${p}`);
console.log(
  `rewrote ${rewrittenRefs} relative paths and ${rewrittenMentions} mentions in ${newText.size} files (${Date.now() - started} ms)`,
);
for (const n of notes) console.log(`  note: ${n}`);
if (after.unresolved.length > 0 || lost.length > 0)
  fail('after the moves, these name nothing (the tree is left as it is):', [...after.unresolved, ...lost]);
console.log('after the moves: every relative path resolves and every path the docs cited still exists');
