// The import graph of src/ folder by folder (issue 44's "arrows up and circles"): in each folder, its children
// (files and sub-folders) are the nodes, and an import from anything under child A of anything under child B is an
// arrow A → B; type-only imports and `export … from` count like any other, since they tie the files together the
// same way for a reader. A circle is a group of children that reach each other (a strongly connected component of
// two or more); its arrows up are the fewest arrows that, turned away, leave the children in layers (chosen
// greedily: the arrow carried by the fewest import lines goes first). Also counted: re-export statements (an
// `export … from`, or an `export { x }` of a name this file imported) outside the package entries, which name the
// owning file for a reader.
// Usage: node scripts/import-graph.js [--json] [--all]   (--all: every folder, not only those with circles)
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import ts from 'typescript';

const root = resolve(import.meta.dirname, '..');
const src = join(root, 'src');
/** The package entries: re-exporting is their job (package.json `exports`). */
const ENTRIES = new Set(['src/index.ts', 'src/testing/index.ts', 'src/adapters-entry.ts']);

function walk(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? walk(path) : path.endsWith('.ts') ? [path] : [];
  });
}

const files = walk(src);
const known = new Set(files);
const resolveSpec = (from, spec) => {
  const base = resolve(dirname(from), spec);
  for (const c of [base.replace(/\.js$/, '.ts'), `${base}.ts`, join(base, 'index.ts')])
    if (known.has(c)) return c;
  return undefined;
};

/** Every edge file → file with how it is written. */
const edges = [];
const reexports = [];
for (const file of files) {
  const text = readFileSync(file, 'utf8');
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const line = (node) => sf.getLineAndCharacterOfPosition(node.getStart()).line + 1;
  const rel = relative(root, file);
  const imported = new Set();
  for (const st of sf.statements) {
    const spec =
      (ts.isImportDeclaration(st) || ts.isExportDeclaration(st)) &&
      st.moduleSpecifier &&
      ts.isStringLiteral(st.moduleSpecifier)
        ? st.moduleSpecifier.text
        : undefined;
    if (ts.isImportDeclaration(st)) {
      const clause = st.importClause;
      if (clause?.name) imported.add(clause.name.text);
      const named = clause?.namedBindings;
      if (named && ts.isNamedImports(named)) for (const el of named.elements) imported.add(el.name.text);
      if (named && ts.isNamespaceImport(named)) imported.add(named.name.text);
    }
    if (ts.isExportDeclaration(st) && !ENTRIES.has(rel)) {
      const local =
        !st.moduleSpecifier &&
        st.exportClause &&
        ts.isNamedExports(st.exportClause) &&
        st.exportClause.elements.some((el) => imported.has((el.propertyName ?? el.name).text));
      if (st.moduleSpecifier || local) reexports.push({ where: `${rel}:${line(st)}`, text: st.getText() });
    }
    if (!spec?.startsWith('.')) continue;
    const target = resolveSpec(file, spec);
    if (target) edges.push({ from: file, to: target, where: `${rel}:${line(st)}` });
  }
}

/** Tarjan's strongly connected components. */
function components(nodes, adj) {
  let index = 0;
  const idx = new Map();
  const low = new Map();
  const stack = [];
  const on = new Set();
  const out = [];
  const visit = (v) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of adj.get(v)?.keys() ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
    }
    if (low.get(v) === idx.get(v)) {
      const comp = [];
      let w;
      do {
        w = stack.pop();
        on.delete(w);
        comp.push(w);
      } while (w !== v);
      out.push(comp);
    }
  };
  for (const v of nodes) if (!idx.has(v)) visit(v);
  return out;
}

/**
 * The arrows to turn away so that a circle lies in layers: the children are put in a line by Eades, Lin and Smyth's
 * greedy order (sinks to the end, sources to the front, else the child whose arrows out outweigh its arrows in the
 * most, weighing an arrow by its import lines), and an arrow up is one that points back along that line.
 */
function arrowsUp(comp, adj) {
  const inside = new Set(comp);
  const out = new Map(comp.map((v) => [v, new Map([...(adj.get(v) ?? [])].filter(([w]) => inside.has(w)))]));
  const left = new Set(comp);
  const weight = (v, dir) => {
    let n = 0;
    for (const u of left)
      if (u !== v) n += dir === 'out' ? (out.get(v).get(u)?.length ?? 0) : (out.get(u).get(v)?.length ?? 0);
    return n;
  };
  const front = [];
  const back = [];
  while (left.size > 0) {
    let moved = true;
    while (moved) {
      moved = false;
      for (const v of [...left])
        if (weight(v, 'out') === 0) (back.unshift(v), left.delete(v), (moved = true));
        else if (weight(v, 'in') === 0) (front.push(v), left.delete(v), (moved = true));
    }
    if (left.size === 0) break;
    const best = [...left].sort(
      (a, b) =>
        weight(b, 'out') - weight(b, 'in') - (weight(a, 'out') - weight(a, 'in')) || a.localeCompare(b),
    )[0];
    front.push(best);
    left.delete(best);
  }
  const order = new Map([...front, ...back].map((v, i) => [v, i]));
  const up = [];
  for (const v of comp)
    for (const [w, list] of out.get(v)) if (order.get(w) < order.get(v)) up.push({ from: v, to: w, list });
  return up;
}

const dirs = [src, ...files.map(dirname)].filter((d, i, a) => a.indexOf(d) === i);
for (const f of files) for (let d = dirname(f); d.startsWith(src) && d !== src; d = dirname(d)) dirs.push(d);
const folders = [...new Set(dirs)].sort();
const childOf = (dir, file) => (file.startsWith(dir + sep) ? relative(dir, file).split(sep)[0] : undefined);

const report = [];
for (const dir of folders) {
  const adj = new Map();
  for (const e of edges) {
    const a = childOf(dir, e.from);
    const b = childOf(dir, e.to);
    if (!a || !b || a === b) continue;
    if (!adj.has(a)) adj.set(a, new Map());
    const m = adj.get(a);
    if (!m.has(b)) m.set(b, []);
    m.get(b).push(e.where);
  }
  const nodes = [...new Set([...adj.keys(), ...[...adj.values()].flatMap((m) => [...m.keys()])])];
  const circles = components(nodes, adj)
    .filter((c) => c.length > 1)
    .map((c) => ({ nodes: c.sort(), up: arrowsUp(c, adj) }));
  report.push({
    folder: relative(root, dir),
    circles: circles.map((c) => ({
      nodes: c.nodes,
      arrowsUp: c.up.map((u) => ({ from: u.from, to: u.to, imports: u.list })),
    })),
  });
}

const withCircles = report.filter((r) => r.circles.length > 0);
const totals = (r) => ({
  circles: r.circles.length,
  arrowsUp: r.circles.reduce((n, c) => n + c.arrowsUp.length, 0),
});
const summary = {
  src: totals(report.find((r) => r.folder === 'src')),
  app: totals(report.find((r) => r.folder === 'src/app')),
  everyFolder: withCircles.reduce(
    (acc, r) => {
      const t = totals(r);
      return { circles: acc.circles + t.circles, arrowsUp: acc.arrowsUp + t.arrowsUp };
    },
    { circles: 0, arrowsUp: 0 },
  ),
  reexports: reexports.length,
};
if (process.argv.includes('--json'))
  console.log(JSON.stringify({ summary, folders: withCircles, reexports }, null, 2));
else {
  const s = summary;
  console.log(
    `circles (arrows up): src/ ${s.src.circles} (${s.src.arrowsUp}), src/app/ ${s.app.circles} (${s.app.arrowsUp}),`,
  );
  console.log(`  every folder under src/ ${s.everyFolder.circles} (${s.everyFolder.arrowsUp})`);
  for (const r of process.argv.includes('--all') ? report : withCircles)
    for (const c of r.circles) {
      console.log(`  ${r.folder}: ${c.nodes.join(' ↔ ')}`);
      for (const u of c.arrowsUp) console.log(`    up: ${u.from} → ${u.to}  ${u.imports.join(' ')}`);
    }
  console.log(`re-export statements outside the package entries: ${reexports.length}`);
  for (const r of reexports) console.log(`  ${r.where}  ${r.text.replace(/\s+/g, ' ').slice(0, 100)}`);
}
