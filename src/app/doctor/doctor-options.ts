import type { DoctorCheck, DoctorExitCode } from './check.js';

/** What `doctor` is asked to check (the command's flags, compiled) and what it answers. */
export interface DoctorReport {
  readonly checks: readonly DoctorCheck[];
  readonly engineReachable: boolean;
  readonly exitCode: DoctorExitCode;
}

export interface DoctorOptions {
  /** Images that must be present locally (default: the pair-driver image). The first one runs the GPU probe. */
  readonly images: readonly string[];
  readonly probeGpu: boolean;
  /** `--registry` when given (absolute), else null. */
  readonly registryPath: string | null;
  /** `--registry` given a PostgreSQL URL: checked instead of a file. */
  readonly registryPostgres?: { readonly display: string; readonly connection: unknown };
  readonly defaultRegistryPath: string;
  /** The compiled allowlist (real paths; absent or empty: the default roots): reported, each checked against the rules. */
  readonly mountRoots?: readonly string[];
  /** The invoking user's home folder: a default root (its non-hidden subfolders). */
  readonly homeDir?: string;
  /** `--output` or the working directory: the filesystem whose free space matters. */
  readonly outputDir: string;
  /** With `--manifest`: the bytes that batch's log and session caps could need on that file system. */
  readonly batchNeedBytes?: number | null;
  /** With `--manifest`: its capacity.image_disk_bytes (null: not set, the default budget applies). */
  readonly imageDiskBytes?: number | null;
  /** The command the user runs (`bin/roboguide-eval`, or the installed binary's name): fixes name it. */
  readonly bin?: string;
  /** `--probe-runtime NAME`: run a short container under that OCI runtime and report its kernel (issue 29). */
  readonly probeRuntime?: string;
}
