import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { STDERR_LOG } from '../../core/evidence-names.js';
import { explainResult, lastLines } from '../../core/next-steps.js';
import * as Flags from '@oclif/core/flags';
import { runPair } from '../../app/pair/run-pair.js';
import type { RunPairOutcome } from '../../app/pair/run-pair-types.js';
import { BaseCommand } from '../../cli/base-command.js';
import {
  bindAddressFlag,
  admissionRegistryFlag,
  allowShortSecretsFlag,
  executorFlags,
  mountRootFlags,
  mountRootsFrom,
} from '../../cli/flags.js';
import { trapTermination } from '../../cli/termination.js';
import { createPairRunWiring, evidenceStoreAt } from '../../command-root.js';
import { executorFromFlags } from '../../core/executor.js';
import { InvalidInputError } from '../../core/errors.js';
import type { ResultRecord } from '../../core/result.js';

export default class PairRun extends BaseCommand {
  static override summary =
    'Run one evaluation pair in its own container, in the foreground, and print its result (classification, reasons, what broke the outcome contract).';
  static override description = [
    'The spec is one JSON object with the fields of a manifest job: job_id, argv, cwd, outcome_path, environment,',
    'ports, timeout_seconds, image, gpus, b1_ports, plus optional sessions_dir, stop_budget_seconds,',
    "log_limit_bytes (per stream, default 1 GiB) and allowed_http_statuses. Environment values may reference this process's variables only as the whole string",
    '"${NAME}"; resolved values are passed to the container and never written anywhere.',
    '',
    'The pair gets the batch lifecycle: receipt first, container created with labels, init, no-new-privileges;',
    'stdout/stderr streamed (redacted) to files; wall budget with a controlled stop (SIGTERM, stop budget, kill);',
    'outcome and Codex sessions collected; then the container is removed and its absence verified.',
    '',
    'Exit codes: 0 classification "completed" and the slot released; 1 any other classification, a held slot or a',
    'runtime failure (the evidence is still written and the result printed); 2 invalid spec, unset referenced variable or one under 8 characters; 3 no Docker engine.',
  ].join('\n');
  static override examples = [
    '<%= config.bin %> pair run --spec pair.json',
    'OPENAI_API_KEY=... <%= config.bin %> pair run --spec pair.json --output ./run-1 --json',
  ];
  static override flags = {
    spec: Flags.string({ description: 'path of the pair spec JSON ("-" for stdin)', required: true }),
    output: Flags.string({
      description:
        'directory for receipt, logs, sessions and result.json (must be new or empty; default: a new directory here)',
    }),
    'bind-address': bindAddressFlag,
    registry: admissionRegistryFlag,
    'stop-budget': Flags.integer({
      description: 'seconds between SIGTERM and kill in a controlled stop (default: spec or 240)',
      min: 1,
    }),
    ...executorFlags,
    'allow-short-secrets': allowShortSecretsFlag,
    ...mountRootFlags,
  };

  async run(): Promise<ResultRecord & { output: string }> {
    const { flags } = await this.parse(PairRun);
    const executor = executorFromFlags(flags); // bad executor flags: exit 2 before anything is read or written
    const mountRoots = await mountRootsFrom(flags['mount-root'], flags['mount-root-only']);
    const specText = await readSpec(flags.spec);
    const { deps, host } = createPairRunWiring(flags.registry, specText, executor);
    // SIGINT/SIGTERM (a backend adapter cancelling us): controlled stop of the container, then the usual
    // collection and verified removal; the signal is re-raised once the evidence is written.
    let stopBudgetSec: number | undefined;
    const termination = trapTermination(
      (signal) =>
        `${signal}: stopping: the agent has ${stopBudgetSec === undefined ? 'its stop budget' : `${stopBudgetSec} s`} to exit after SIGTERM, then the container is removed; press Ctrl-C again to kill it now\n`,
      (signal) =>
        `${signal} again: killing the agent now (SIGKILL); then its evidence is kept and its container removed…\n`,
    );
    let outcome: RunPairOutcome;
    try {
      outcome = await runPair(deps, {
        ...host,
        specText,
        specSource: flags.spec,
        ...(flags.output !== undefined ? { output: flags.output } : {}),
        bindAddress: flags['bind-address'],
        bin: this.userBin,
        ...(flags['stop-budget'] !== undefined ? { stopBudgetSec: flags['stop-budget'] } : {}),
        terminate: termination.signal,
        killNow: termination.killNow,
        onStopBudget: (sec) => (stopBudgetSec = sec),
        allowShortSecrets: flags['allow-short-secrets'],
        mountRoots,
        onWarning: (message) => this.warn(message),
      });
    } catch (err) {
      termination.reraise();
      throw err;
    } finally {
      await deps.dispose();
      termination.dispose();
    }
    await this.render(outcome);
    termination.reraise();
    return { ...outcome.result, output: outcome.output };
  }

  /** The human lines (exit 1 unless the pair completed and its slot was released). */
  private async render({ result, output, reconciliation }: RunPairOutcome): Promise<void> {
    const released = reconciliation.kind === 'committed' || reconciliation.kind === 'already_committed';
    if (result.classification !== 'completed' || !released) process.exitCode = 1;
    this.log(
      `pair ${result.job_id}: ${result.classification}${result.reasons.length ? ` (${result.reasons.join(', ')})` : ''}`,
    );
    this.log(
      `  container ${result.container.id ?? '-'} exit ${result.container.exit_code ?? '-'}; removed and verified absent: ${result.cleanup.verified_absent}`,
    );
    this.log(
      `  logs: stdout ${result.logs.stdout.bytes} B, stderr ${result.logs.stderr.bytes} B; sessions ${result.sessions.files} file(s)`,
    );
    for (const p of result.outcome_problems ?? []) this.log(`  outcome ${p.path}: ${p.message}`);
    if (result.provider_failure)
      this.log(
        `  provider failure: ${result.provider_failure.kind} (HTTP ${result.provider_failure.http_status ?? '?'})`,
      );
    if (result.engine_error) this.logToStderr(`  engine: ${result.engine_error.message}`);
    // Why in words, and what would let it through (issue 40); the stderr tail is masked on disk already.
    const stderrPath = join(output, STDERR_LOG);
    const why = explainResult(
      {
        reasons: result.reasons,
        outcome: result.outcome,
        exit_code: result.container.exit_code,
        stderr_tail: result.classification === 'completed' ? [] : await stderrTail(output, result),
        stderr_path: stderrPath,
      },
      'allowed_http_statuses',
    );
    for (const line of why) this.log(`  ${line}`);
    this.log(`  evidence: ${output}`);
    if (!released) {
      // The receipt records the registry: reconcile finds it without --registry.
      this.logToStderr(
        `  capacity slot kept (${reconciliation.reason ?? reconciliation.kind}): ${reconciliation.detail}; finish with \`${this.userBin} reconcile --output ${output} --execute\``,
      );
    }
  }
}

/** The last lines of the pair's stderr.log (masked when written; made inert by `log`). */
async function stderrTail(output: string, result: ResultRecord): Promise<string[]> {
  const tail = await evidenceStoreAt(output).readTail(STDERR_LOG, TAIL_BYTES);
  return tail === null ? [] : lastLines(tail, result.logs.stderr.bytes <= TAIL_BYTES);
}

const TAIL_BYTES = 4096;

/** The spec's text ("-": stdin); a file that cannot be read is an invalid spec (exit 2). */
async function readSpec(spec: string): Promise<string> {
  try {
    return spec === '-' ? await readStdin() : await readFile(spec, 'utf8');
  } catch (err) {
    throw new InvalidInputError('E_SPEC_INVALID', `cannot read pair spec ${spec}`, [
      { path: '$', rule: `cannot read file: ${(err as NodeJS.ErrnoException).code ?? 'error'}` },
    ]);
  }
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}
