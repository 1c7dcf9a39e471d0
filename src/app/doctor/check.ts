import type { ExitCode } from '../../core/errors.js';

export type CheckStatus = 'ok' | 'warn' | 'fail';

/**
 * One line of `doctor`: `fix` says what to do when the status is not ok (null when there is nothing to do);
 * `facts`, on the host checks, the host facts the line was read from (as `batch.json` records them).
 */
export interface DoctorCheck {
  readonly name: string;
  readonly status: CheckStatus;
  readonly detail: string;
  readonly fix: string | null;
  readonly facts?: Readonly<Record<string, unknown>>;
}

export type DoctorExitCode = typeof ExitCode.ok | typeof ExitCode.runtime | typeof ExitCode.engineUnavailable;

export const GIB = 1024 ** 3;
export const MIB = 1024 ** 2;

export const ok = (name: string, detail: string): DoctorCheck => ({ name, status: 'ok', detail, fix: null });
export const warn = (name: string, detail: string, fix: string): DoctorCheck => ({
  name,
  status: 'warn',
  detail,
  fix,
});
export const fail = (name: string, detail: string, fix: string): DoctorCheck => ({
  name,
  status: 'fail',
  detail,
  fix,
});

export function formatBytes(bytes: number): string {
  if (bytes >= GIB) return `${(bytes / GIB).toFixed(1)} GiB`;
  return `${Math.round(bytes / MIB)} MiB`;
}
