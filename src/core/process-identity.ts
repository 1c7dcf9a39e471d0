/**
 * Who a process is, across pid reuse and reboots (SPEC §4): its pid, its start time in clock ticks since boot
 * (field 22 of `/proc/<pid>/stat`) and the host's boot id. The one shape of the receipt's `supervisor`, the
 * supervisor record in batch.json and the registry's supervisor lease.
 */
export interface ProcessIdentity {
  readonly pid: number;
  readonly start_ticks: string | null;
  readonly boot_id: string | null;
}

/** What `/proc/<pid>/stat` says of a process: its state letter (field 3) and start time (field 22). */
export interface ProcStat {
  readonly state: string;
  readonly startTicks: string | null;
}

/**
 * Parses the text of `/proc/<pid>/stat`. The command name (field 2) may hold spaces and parentheses: the fields
 * are split after the last `)`. Null when the text has no command name at all.
 */
export function parseProcStat(text: string): ProcStat | null {
  const close = text.lastIndexOf(')');
  if (close === -1) return null;
  const rest = text.slice(close + 2).split(' ');
  const state = rest[0];
  if (state === undefined || state === '') return null;
  // field 22 overall = index 19 after the pid and the command name
  const startTicks = rest[19];
  return { state, startTicks: startTicks === undefined || startTicks === '' ? null : startTicks.trim() };
}

/**
 * Is the recorded process the same live process, given what the host says now (its boot id, and the text of
 * `/proc/<recorded pid>/stat`, null when there is none)? Another boot, no such pid, another start time, or a
 * zombie (Z) or dead task (X) is not: killed but not reaped yet by its parent (or by init, for a detached
 * supervisor), it still has its /proc entry and start time.
 */
export function isSameProcess(
  recorded: ProcessIdentity,
  now: { readonly bootId: string | null; readonly procStat: string | null },
): boolean {
  if (recorded.boot_id !== null && now.bootId !== recorded.boot_id) return false;
  if (now.procStat === null) return false;
  const stat = parseProcStat(now.procStat);
  if (stat === null || stat.state === 'Z' || stat.state === 'X') return false;
  return stat.startTicks !== null && stat.startTicks === recorded.start_ticks;
}
