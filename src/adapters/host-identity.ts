import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';

/** Linux boot id: changes on every boot, so a claim from a previous boot is known to be lost. */
export async function readBootId(): Promise<string | null> {
  try {
    return (await readFile('/proc/sys/kernel/random/boot_id', 'utf8')).trim();
  } catch {
    return null;
  }
}

/** Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat), or null when it is gone. */
export async function readProcessStartTicks(pid: number): Promise<string | null> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return rest[19] ?? null; // field 22 overall = index 19 after the first two fields
  } catch {
    return null;
  }
}

export interface ProcessIdentity {
  readonly pid: number;
  readonly start_ticks: string | null;
  readonly boot_id: string | null;
}

export async function currentProcessIdentity(): Promise<ProcessIdentity> {
  return { pid: process.pid, start_ticks: await readProcessStartTicks(process.pid), boot_id: await readBootId() };
}

/** Is the recorded process still the same live process (same pid, same start time, same boot)? */
export function isSameProcessAlive(identity: ProcessIdentity): Promise<boolean> {
  return Promise.resolve(isSameProcessAliveSync(identity));
}

function readSync(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}

/** isSameProcessAlive, synchronous: for use inside a registry transaction. */
export function isSameProcessAliveSync(identity: ProcessIdentity): boolean {
  const bootId = readSync('/proc/sys/kernel/random/boot_id')?.trim() ?? null;
  if (identity.boot_id !== null && bootId !== identity.boot_id) return false;
  const stat = readSync(`/proc/${identity.pid}/stat`);
  if (stat === null) return false;
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // A zombie (Z) or a dead task (X) has ended: killed, only not reaped yet by its parent (or by init, for a
  // detached supervisor), it still has its /proc entry and start time.
  if (fields[0] === 'Z' || fields[0] === 'X') return false;
  const ticks = fields[19] ?? null;
  return ticks !== null && ticks === identity.start_ticks;
}
