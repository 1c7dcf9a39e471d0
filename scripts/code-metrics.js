// Code metrics for reviews: imports that cross layers the wrong way, the largest functions, files over 300 lines.
// Usage: node scripts/code-metrics.js [--json]   (reads src/ with the TypeScript parser; writes nothing)
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

const root = resolve(import.meta.dirname, '..');
const src = join(root, 'src');

function walk(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? walk(path) : path.endsWith('.ts') ? [path] : [];
  });
}

const layerOf = (file) => relative(src, file).split('/')[0].replace(/\.ts$/, '');
/** Who may import whom: commands → app → core; adapters implement app's ports; the roots wire everything. */
const forbidden = {
  app: ['adapters', 'commands', 'cli'],
  core: ['app', 'adapters', 'commands', 'cli'],
  adapters: ['commands', 'cli'],
};

const files = walk(src);
const crossings = [];
const functions = [];
const long = [];
for (const file of files) {
  const text = readFileSync(file, 'utf8');
  const lines = text.split('\n').length;
  if (lines > 300) long.push({ file: relative(root, file), lines });
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const from = layerOf(file);
  const visit = (node) => {
    if (
      (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) &&
      node.moduleSpecifier &&
      ts.isStringLiteral(node.moduleSpecifier)
    ) {
      const spec = node.moduleSpecifier.text;
      if (spec.startsWith('.')) {
        const to = layerOf(resolve(dirname(file), spec));
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
    if (
      ts.isFunctionDeclaration(node) ||
      ts.isMethodDeclaration(node) ||
      ts.isArrowFunction(node) ||
      ts.isFunctionExpression(node) ||
      ts.isConstructorDeclaration(node)
    ) {
      if (node.body) {
        const start = sf.getLineAndCharacterOfPosition(node.getStart()).line + 1;
        const end = sf.getLineAndCharacterOfPosition(node.getEnd()).line + 1;
        const name =
          node.name?.getText?.() ??
          (ts.isVariableDeclaration(node.parent) ? node.parent.name.getText() : '(anonymous)');
        functions.push({ where: `${relative(root, file)}:${start}`, name, lines: end - start + 1 });
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
}
functions.sort((a, b) => b.lines - a.lines);
long.sort((a, b) => b.lines - a.lines);
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
  filesOver300Lines: long,
};
if (process.argv.includes('--json')) console.log(JSON.stringify({ ...report, crossings }, null, 2));
else {
  console.log(`files in src/: ${report.files}`);
  console.log(
    `wrong-way imports: ${report.wrongWayImports} in ${report.filesWithWrongWayImports} files ${JSON.stringify(report.wrongWayImportsByEdge)}`,
  );
  console.log(`functions over 60 lines: ${report.functionsOver60Lines}`);
  for (const f of report.largestFunctions)
    console.log(`  ${String(f.lines).padStart(4)}  ${f.name}  ${f.where}`);
  console.log(`files over 300 lines: ${long.length}`);
  for (const f of long) console.log(`  ${String(f.lines).padStart(4)}  ${f.file}`);
}
