/**
 * Failpoints for crash tests: `ROBOGUIDE_FAILPOINT=<name>[#<n>]` makes the process SIGKILL itself the n-th time
 * (default first) it passes the named point. Unset in production, where every call is a cheap no-op.
 */
const spec = process.env['ROBOGUIDE_FAILPOINT'] ?? '';
const [target, nthText] = spec.split('#');
const nth = nthText === undefined ? 1 : Number(nthText);
let seen = 0;

export function failpoint(name: string): void {
  if (target === undefined || target === '' || target !== name) return;
  seen++;
  if (seen === nth) process.kill(process.pid, 'SIGKILL');
}
