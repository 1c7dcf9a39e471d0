// Code metrics for reviews (issue 25's before/after table): imports that cross layers the wrong way (adapters
// included: a driven adapter imports only src/core and src/app/ports), the largest functions, files over 300 and 400
// lines, lines over 110 and 150 characters (src and test), `as unknown as` casts in tests, direct timers and clock
// reads in src/app, and "where does X happen": how many files hold each rule.
// A function's lines: from its start (a method's name, an arrow's parameters) to its closing brace, blank and comment
// lines included; ESLint's max-lines-per-function (eslint.config.js) counts the same way and fails `npm run lint` on a
// function in src over 80.
// Usage: node scripts/code-metrics.js [--json]   (reads src/ and test/ with the TypeScript parser; writes nothing)
// Unit coverage of src/app is a separate command: `npm run coverage` (vitest --coverage over the unit project).
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

const root = resolve(import.meta.dirname, '..');
const src = join(root, 'src');
const test = join(root, 'test');

function walk(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? walk(path) : path.endsWith('.ts') ? [path] : [];
  });
}

const layerOf = (file) => relative(src, file).split('/')[0].replace(/\.ts$/, '');
/**
 * Who may import whom: commands → app → core; adapters implement app's ports; the roots wire everything. A driven
 * adapter imports app only through src/app/ports; the driving adapter src/adapters/http calls the use-cases.
 */
const forbidden = {
  app: ['adapters', 'commands', 'cli'],
  core: ['app', 'adapters', 'commands', 'cli'],
  adapters: ['commands', 'cli', 'app-not-ports'],
};
const targetOf = (from, file, target) => {
  const to = layerOf(target);
  const drivingAdapter = relative(src, file).startsWith('adapters/http/');
  if (
    from === 'adapters' &&
    to === 'app' &&
    !drivingAdapter &&
    !relative(src, target).startsWith('app/ports/')
  )
    return 'app-not-ports';
  return to;
};

/**
 * "Where does X happen": each rule is defined by the names of the functions (declarations, methods, named arrow
 * functions) that decide it; `defined` counts the files in src declaring one of them (the files a reader opens to
 * read the rule), `used` the further files that call one. Extend the patterns when a rule gets a new function.
 */
const RULES = {
  // remove a container, then insist on the engine's 404 (pairs, sessions, leftovers of the testing kit)
  'removal verified':
    /^(removeAndVerify|removeVerified|removeUnverifiedContainer|verifyRemoved|removeUntilGone)$/,
  // a pair's class (classify + the reason table) and the batch's `--exit-status` verdict
  'verdict decided': /^(classify|classOfReason|batchFailed|failedPairs|batchVerdict|pairVerdict)$/,
  // secret values and token shapes replaced by the mask (text, streams, JSON, outcome copies, the logger)
  'secret masked':
    /^(redactText|textRedactor|redactOutcome|redactJson|redactOnce|redactBytes|compileRedaction|createRedactStream|redactingLogger|batchRedactor|maskOutcomeCopy|readAndMaskOutcome|pinoRedactionOptions|maskFor)$/,
  // the batch pauses: which reasons a finished pair raises, the infrastructure streak, what survives a resume, faults
  'pause decided':
    /^(pause|pauseReasonsFor|infrastructureStreak|survivingResume|pauseReasonOfFault|shouldPause|decidePause)$/,
  // which node and how much GPU MiB a pair may take: the admission rule, the peak, the registries' budget check
  'GPU admitted':
    /^(admitPair|admitOnNodes|admitOnePair|admit|cappedGpuMib|largestPeakMib|expectedGpuMib|workersAllowed|checkAdmitRequest|gpuBudgetFits)$/,
};
/** Files whose matching names are test hooks, not rules: the failpoints (`pause`, `pausepoint`). */
const NOT_A_RULE = /failpoints\.ts$/;
/** Names too common to count as a call of the rule when called as a method (`stream.pause()`): declarations only. */
const GENERIC_NAMES = new Set(['pause', 'admit']);
const ruleFiles = Object.fromEntries(
  Object.keys(RULES).map((k) => [k, { defined: new Set(), used: new Set() }]),
);

/** Direct timers and clock reads in src/app and src/core (docs/architecture.md "Where time lives": only the Clock port). */
const TIMER_CALLS = new Set(['setTimeout', 'setInterval', 'setImmediate']);
const timers = [];

const nameOf = (node) =>
  node.name?.getText?.() ??
  (ts.isVariableDeclaration(node.parent) ? node.parent.name.getText() : '(anonymous)');
const isFunction = (node) =>
  ts.isFunctionDeclaration(node) ||
  ts.isMethodDeclaration(node) ||
  ts.isArrowFunction(node) ||
  ts.isFunctionExpression(node) ||
  ts.isConstructorDeclaration(node);

const files = walk(src);
const testFiles = walk(test);
const crossings = [];
const functions = [];
const long = [];
const longTests = [];
const wideLines = { src: { over110: 0, over150: 0 }, test: { over110: 0, over150: 0 } };
const countWide = (where, text) => {
  for (const line of text.split('\n')) {
    if (line.length > 110) wideLines[where].over110++;
    if (line.length > 150) wideLines[where].over150++;
  }
};
const casts = [];
const srcCasts = [];
const isUnknownCast = (node) =>
  ts.isAsExpression(node) &&
  ts.isAsExpression(node.expression) &&
  node.expression.type.kind === ts.SyntaxKind.UnknownKeyword;
for (const file of testFiles) {
  const text = readFileSync(file, 'utf8');
  countWide('test', text);
  const lines = text.split('\n').length;
  if (lines > 300) longTests.push({ file: relative(root, file), lines });
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const visit = (node) => {
    // `x as unknown as T`: an AsExpression to T whose operand is an AsExpression to unknown
    if (isUnknownCast(node))
      casts.push(`${relative(root, file)}:${sf.getLineAndCharacterOfPosition(node.getStart()).line + 1}`);
    ts.forEachChild(node, visit);
  };
  visit(sf);
}
for (const file of files) {
  const text = readFileSync(file, 'utf8');
  countWide('src', text);
  const lines = text.split('\n').length;
  if (lines > 300) long.push({ file: relative(root, file), lines });
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const from = layerOf(file);
  const inApp = from === 'app' || from === 'core';
  const where = (node) =>
    `${relative(root, file)}:${sf.getLineAndCharacterOfPosition(node.getStart()).line + 1}`;
  const visit = (node) => {
    if (isUnknownCast(node)) srcCasts.push(where(node));
    if (
      (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) &&
      node.moduleSpecifier &&
      ts.isStringLiteral(node.moduleSpecifier)
    ) {
      const spec = node.moduleSpecifier.text;
      if (spec.startsWith('.')) {
        const to = targetOf(from, file, resolve(dirname(file), spec));
        if ((forbidden[from] ?? []).includes(to))
          crossings.push({
            file: relative(root, file),
            line: sf.getLineAndCharacterOfPosition(node.getStart()).line + 1,
            from,
            to,
            spec,
          });
      }
    }
    if (isFunction(node) && node.body) {
      const start = sf.getLineAndCharacterOfPosition(node.getStart()).line + 1;
      const end = sf.getLineAndCharacterOfPosition(node.getEnd()).line + 1;
      const name = nameOf(node);
      functions.push({ where: `${relative(root, file)}:${start}`, name, lines: end - start + 1 });
      for (const [rule, pattern] of Object.entries(RULES))
        if (pattern.test(name) && !NOT_A_RULE.test(file)) ruleFiles[rule].defined.add(relative(root, file));
    }
    if (ts.isCallExpression(node)) {
      const callee = ts.isPropertyAccessExpression(node.expression) ? node.expression.name : node.expression;
      if (ts.isIdentifier(callee)) {
        const generic = GENERIC_NAMES.has(callee.text) && callee !== node.expression;
        for (const [rule, pattern] of Object.entries(RULES))
          if (pattern.test(callee.text) && !generic && !NOT_A_RULE.test(file))
            ruleFiles[rule].used.add(relative(root, file));
        const text = node.expression.getText();
        if (
          inApp &&
          (TIMER_CALLS.has(text.replace(/^globalThis\./, '')) ||
            /^(Date\.now|performance\.now|process\.hrtime(\.bigint)?|process\.uptime)$/.test(text))
        )
          timers.push({ where: where(node), what: `${text}()` });
      }
    }
    if (inApp && ts.isNewExpression(node) && node.expression.getText() === 'Date')
      timers.push({
        where: where(node),
        what: (node.arguments?.length ?? 0) === 0 ? 'new Date()' : 'new Date(x)',
      });
    ts.forEachChild(node, visit);
  };
  visit(sf);
}
functions.sort((a, b) => b.lines - a.lines);
long.sort((a, b) => b.lines - a.lines);
longTests.sort((a, b) => b.lines - a.lines);
const where = Object.fromEntries(
  Object.entries(ruleFiles).map(([rule, { defined, used }]) => [
    rule,
    {
      defined: [...defined].sort(),
      used: [...used].filter((f) => !defined.has(f)).sort(),
    },
  ]),
);
const report = {
  files: files.length,
  wrongWayImports: crossings.length,
  wrongWayImportsByEdge: crossings.reduce(
    (acc, c) => ({ ...acc, [`${c.from}→${c.to}`]: (acc[`${c.from}→${c.to}`] ?? 0) + 1 }),
    {},
  ),
  filesWithWrongWayImports: new Set(crossings.map((c) => c.file)).size,
  largestFunctions: functions.slice(0, 30),
  functionsOver60Lines: functions.filter((f) => f.lines > 60).length,
  functionsOver80Lines: functions.filter((f) => f.lines > 80),
  filesOver300Lines: long,
  filesOver400Lines: long.filter((f) => f.lines > 400),
  files300To399Lines: long.filter((f) => f.lines <= 399).length,
  testFilesOver300Lines: longTests,
  testFilesOver400Lines: longTests.filter((f) => f.lines > 400),
  linesOver110: { src: wideLines.src.over110, test: wideLines.test.over110 },
  linesOver150: { src: wideLines.src.over150, test: wideLines.test.over150 },
  unknownCastsInTests: casts.length,
  unknownCastsInSrc: srcCasts,
  timersInApp: timers,
  whereDoesItHappen: where,
};
if (process.argv.includes('--json')) console.log(JSON.stringify({ ...report, crossings, casts }, null, 2));
else {
  console.log(`files in src/: ${report.files}`);
  console.log(
    `wrong-way imports: ${report.wrongWayImports} in ${report.filesWithWrongWayImports} files ${JSON.stringify(report.wrongWayImportsByEdge)}`,
  );
  console.log(
    `functions over 60 lines: ${report.functionsOver60Lines}; over 80: ${report.functionsOver80Lines.length}`,
  );
  for (const f of report.largestFunctions)
    console.log(`  ${String(f.lines).padStart(4)}  ${f.name}  ${f.where}`);
  for (const c of crossings) console.log(`  ${c.file}:${c.line}  ${c.from}→${c.to}  ${c.spec}`);
  console.log(
    `files over 300 lines: ${long.length} (300 to 399: ${report.files300To399Lines}; over 400: ${report.filesOver400Lines.length})`,
  );
  for (const f of long) console.log(`  ${String(f.lines).padStart(4)}  ${f.file}`);
  console.log(
    `test files over 300 lines: ${longTests.length} (over 400: ${report.testFilesOver400Lines.length})`,
  );
  for (const f of report.testFilesOver400Lines) console.log(`  ${String(f.lines).padStart(4)}  ${f.file}`);
  console.log(`lines over 110 characters: src ${wideLines.src.over110}, test ${wideLines.test.over110}`);
  console.log(`lines over 150 characters: src ${wideLines.src.over150}, test ${wideLines.test.over150}`);
  console.log(`\`as unknown as\` casts in test/: ${casts.length}; in src/: ${srcCasts.length}`);
  for (const c of srcCasts) console.log(`  ${c}`);
  const clock = timers.filter((t) => t.what !== 'new Date(x)');
  console.log(
    `direct timers and clock reads in src/app and src/core: ${clock.length} (setTimeout/setInterval/setImmediate, Date.now, new Date(), performance.now, process.hrtime/uptime; plus ${timers.length - clock.length} new Date(x) conversions)`,
  );
  for (const t of clock) console.log(`  ${t.what}  ${t.where}`);
  console.log("where does it happen (files declaring the rule's functions; further files calling them):");
  for (const [rule, { defined, used }] of Object.entries(where))
    console.log(
      `  ${rule.padEnd(17)} ${String(defined.length).padStart(2)} defined, ${String(used.length).padStart(2)} calling: ${defined.join(' ')}`,
    );
}
