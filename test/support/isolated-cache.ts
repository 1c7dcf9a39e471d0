// Each integration test file gets its own $XDG_CACHE_HOME: what one file's pairs taught the sessions-copy skip
// (roboguide-eval/image-sessions.json, src/adapters/fs/image-sessions-file.ts) must not change what another file,
// or a run on the same machine before it, sees. The CLI's compile cache stays the usual one (a link to it), so the
// CLIs a test spawns start as fast as before.
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';

const usual = process.env['XDG_CACHE_HOME']?.startsWith('/')
  ? process.env['XDG_CACHE_HOME']
  : join(homedir(), '.cache');
const cache = mkdtempSync(join(tmpdir(), 'rg-test-cache-'));
mkdirSync(join(cache, 'roboguide-eval'), { mode: 0o700 });
try {
  const compiled = join(usual, 'roboguide-eval', 'node-compile-cache');
  mkdirSync(compiled, { recursive: true, mode: 0o700 });
  symlinkSync(compiled, join(cache, 'roboguide-eval', 'node-compile-cache'));
} catch {
  // no usual cache folder: the CLIs compile without one
}
process.env['XDG_CACHE_HOME'] = cache;
afterAll(() => rmSync(cache, { recursive: true, force: true }));
