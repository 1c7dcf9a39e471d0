import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { HostIdentity } from '../app/ports/host-identity.js';
import { isSameProcess, parseProcStat, type ProcessIdentity } from '../core/process-identity.js';

const BOOT_ID_PATH = '/proc/sys/kernel/random/boot_id';

/** Linux boot id: changes on every boot, so a claim from a previous boot is known to be lost. */
export function readBootId(): Promise<string | null> {
  return Promise.resolve(bootId());
}

/**
 * The boot id, read once a process (it cannot change while the process lives): a file of the kernel's, read at once,
 * never through the thread pool, whose answer a busy loop takes milliseconds to see (issue 39).
 */
let knownBootId: string | null | undefined;
function bootId(): string | null {
  return (knownBootId ??= readSync(BOOT_ID_PATH)?.trim() ?? null);
}

/** Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat), or null when it is gone. */
export async function readProcessStartTicks(pid: number): Promise<string | null> {
  try {
    return parseProcStat(await readFile(`/proc/${pid}/stat`, 'utf8'))?.startTicks ?? null;
  } catch {
    return null;
  }
}

/**
 * This process's identity: kept once read whole (its pid, start time and boot never change while it lives), like the
 * boot id. A read that failed (no descriptor left, say) is not kept: the next call reads again.
 */
let ownIdentity: ProcessIdentity | null = null;
export function currentProcessIdentity(): Promise<ProcessIdentity> {
  if (ownIdentity !== null) return Promise.resolve(ownIdentity);
  const identity: ProcessIdentity = {
    pid: process.pid,
    start_ticks: parseProcStat(readSync(`/proc/${process.pid}/stat`) ?? '')?.startTicks ?? null,
    boot_id: bootId(),
  };
  if (identity.start_ticks !== null && identity.boot_id !== null) ownIdentity = identity;
  return Promise.resolve(identity);
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
