import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { HostIdentity } from '../app/ports/host-identity.js';
import { isSameProcess, parseProcStat, type ProcessIdentity } from '../core/process-identity.js';

const BOOT_ID_PATH = '/proc/sys/kernel/random/boot_id';

/** Linux boot id: changes on every boot, so a claim from a previous boot is known to be lost. */
export async function readBootId(): Promise<string | null> {
  try {
    return (await readFile(BOOT_ID_PATH, 'utf8')).trim();
  } catch {
    return null;
  }
}

/** Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat), or null when it is gone. */
export async function readProcessStartTicks(pid: number): Promise<string | null> {
  try {
    return parseProcStat(await readFile(`/proc/${pid}/stat`, 'utf8'))?.startTicks ?? null;
  } catch {
    return null;
  }
}

export async function currentProcessIdentity(): Promise<ProcessIdentity> {
  return {
    pid: process.pid,
    start_ticks: await readProcessStartTicks(process.pid),
    boot_id: await readBootId(),
  };
}

function readSync(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}

/** Is the recorded process still the same live process (same pid, same start time, same boot)? Synchronous: for use inside a registry transaction. */
export function isSameProcessAliveSync(identity: ProcessIdentity): boolean {
  return isSameProcess(identity, {
    bootId: readSync(BOOT_ID_PATH)?.trim() ?? null,
    procStat: readSync(`/proc/${identity.pid}/stat`),
  });
}

/** The HostIdentity port read from Linux's /proc. */
export const procHostIdentity: HostIdentity = {
  current: currentProcessIdentity,
  bootId: readBootId,
  isAlive: isSameProcessAliveSync,
};
