// The options, dependencies and outcome of a single `pair run`.
import type { ProtectedPaths } from '../../core/mount-policy.js';
import type { Receipt } from '../../core/receipt.js';
import type { ResultRecord } from '../../core/result.js';
import type { ExecutePairDeps } from './execute-pair-types.js';
import type { CapacityRegistry } from '../ports/capacity-registry.js';
import type { ReconcileReport } from './reconcile-pair.js';

export interface RunPairOptions {
  readonly specText: string;
  readonly specSource: string;
  readonly output?: string;
  readonly bindAddress: string;
  readonly stopBudgetSec?: number;
  readonly environment: Readonly<Record<string, string | undefined>>;
  /**
   * For the receipt. A function is called once the spec passed every check, so that reading it (git, in the CLI)
   * runs alongside the engine checks instead of before them.
   */
  readonly codeVersion: string | (() => Promise<string>);
  readonly cwd: string;
  /** The host's IP addresses: when given, `bindAddress` must be one of them (or 0.0.0.0 / ::). */
  readonly hostAddresses?: readonly string[];
  /** $HOME and the engine's sockets: never mounted (the output directory and the registry always count). */
  readonly hostPaths?: HostPaths | (() => Promise<HostPaths>);
  /** The registry database file, for the mount rules (a pair must never reach it). */
  readonly registryPath?: string;
  /** The operator's `--mount-root` folders: when given, `cwd` must lie under one of them (at the check and at launch). */
  readonly mountRoots?: readonly string[];
  /** Where the pair is admitted, as the receipt records it (`registry_path`: reconcile and recover default to it). */
  readonly registryRecord?: string;
  /** The command the user runs (`bin/roboguide-eval`, or the installed binary's name): hints name it. */
  readonly bin?: string;
  /** Accept `${NAME}` values shorter than 8 characters (masked anyway, with a warning). */
  readonly allowShortSecrets?: boolean;
  readonly onWarning?: (message: string) => void;
  /** Aborting it performs the controlled stop (SIGTERM, stop budget, kill); collection and removal still run. */
  readonly terminate?: AbortSignal;
  /** Aborting it after `terminate` kills the container now instead of waiting out the stop budget (a second Ctrl-C). */
  readonly killNow?: AbortSignal;
  /** Told the stop budget the pair runs with, once it is known (the command says it on Ctrl-C). */
  readonly onStopBudget?: (stopBudgetSec: number) => void;
  /** Called once the exclusive receipt is published (the pair is claimed), before its container is made. */
  readonly onClaimed?: () => void;
}

export interface RunPairDeps extends ExecutePairDeps {
  /**
   * The host registry: a pair run takes a slot like a batch pair and gives it back through reconciliation.
   * A function is called only once the spec passed every check (the registry is not touched before).
   */
  readonly registry: CapacityRegistry | (() => Promise<CapacityRegistry>);
  /**
   * The host's memory and the output file system's free bytes, for the default limits (src/core/pair-limits.ts).
   * Absent, or a fact null: the fixed fallbacks.
   */
  readonly limitBasis?: (
    outputDir: string,
  ) => Promise<{ readonly memoryTotalBytes: number | null; readonly outputFreeBytes: number | null }>;
}

export interface RunPairOutcome {
  readonly output: string;
  readonly receipt: Receipt;
  readonly result: ResultRecord;
  /** How the slot was given back (`committed`), or why it is still held. */
  readonly reconciliation: ReconcileReport;
}

export type HostPaths = Pick<ProtectedPaths, 'homeDir' | 'engineSocketPaths' | 'homeDirs' | 'ownedDirs'>;
