// Run by `npm run build` after tsc: records in dist/build-info.json the package version, the git commit this build
// came from and whether tracked files differed from it, so that the built CLI reports the code it runs (its receipts'
// and batch.json's code_version) without asking git each time (src/adapters/code-version.ts). Not a checkout of its
// own (an unpacked tarball, a package inside another project's checkout): commit null. When git cannot tell (missing,
// refusing the repository), nothing is recorded and each command asks git itself, as it would without a build.
import { rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const { BUILD_INFO_FILE, checkoutState, packageVersion } = await import('../dist/adapters/code-version.js');
const target = `${root}${BUILD_INFO_FILE}`;
try {
  const state = await checkoutState(root);
  writeFileSync(target, `${JSON.stringify({ version: await packageVersion(root), ...state })}\n`);
} catch (err) {
  rmSync(target, { force: true });
  const why = String(err?.stderr ?? err?.message ?? err)
    .trim()
    .split('\n')[0];
  process.stderr.write(`build-info: git could not tell this checkout's commit (${why}); not recorded\n`);
}
