// Run by `npm run build` after tsc: records in dist/build-info.json the git commit this build came from and
// whether tracked files differed from it, so that a command reports the code it runs (its receipts' and
// batch.json's code_version) without asking git each time (src/adapters/code-version.ts). Not a checkout of its
// own (an unpacked tarball, a package inside another project's checkout): commit null, the package version alone.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const { BUILD_INFO_FILE, checkoutState } = await import('../dist/adapters/code-version.js');
const state = await checkoutState(root);
writeFileSync(`${root}${BUILD_INFO_FILE}`, `${JSON.stringify(state)}\n`);
