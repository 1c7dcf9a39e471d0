#!/usr/bin/env node
// The tool needs Node 24 (node:sqlite and its dependencies' engines). Run directly with an older Node (the
// machine's Node 20, say), say so plainly instead of failing somewhere inside a dependency.
const major = Number(process.versions.node.split('.')[0]);
if (major < 24) {
  process.stderr.write(
    `roboguide-eval needs Node.js 24 or newer; this is ${process.version}.\n` +
      '  Try: npx roboguide-eval …  (npm puts the pinned Node 24 from node_modules/.bin first on PATH)\n',
  );
  process.exit(1);
}
const { execute } = await import('@oclif/core');
await execute({ dir: import.meta.url });
