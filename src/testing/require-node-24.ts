/**
 * Imported first by the test kit: on a Node older than 24 it refuses with what to do, before any module that
 * needs Node 24 (the SQLite registry's `node:sqlite`) is loaded — rather than "No such built-in module".
 */
const major = Number(process.versions.node.split('.')[0]);
if (major < 24) {
  throw new Error(
    `roboguide-eval/testing needs Node.js 24 or newer (node:sqlite); this is ${process.version}. ` +
      'Run your tests on Node 24: install it (nodejs.org, `nvm install 24`, `fnm install 24`) or add the `node@24` package as a devDependency and run them with npm (`npm test` puts its node_modules/.bin/node first on PATH).',
  );
}
export {};
