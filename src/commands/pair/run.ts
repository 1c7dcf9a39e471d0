import { readFile } from 'node:fs/promises';
import { Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { createPairRunDeps, executorFlags, hostProtectedPaths, PACKAGE_ROOT, specLogSecrets } from '../../composition-root.js';
import { executorFromFlags } from '../../core/executor.js';
import { hostAddresses } from '../../adapters/host-addresses.js';
import { registryFilePath, registryLocation } from '../../adapters/registry/default-path.js';
import { readCodeVersion } from '../../adapters/code-version.js';
import { runPair, type RunPairOutcome } from '../../app/run-pair.js';
import { InvalidInputError } from '../../core/errors.js';
import type { ResultRecord } from '../../core/result.js';

export default class PairRun extends BaseCommand {
  static override summary = 'Run one evaluation pair in its own container, in the foreground, and print its receipt.';
  static override description = [
    'The spec is one JSON object with the fields of a manifest job: job_id, argv, cwd, outcome_path, environment,',
    'ports, timeout_seconds, image, gpus, b1_ports, plus optional sessions_dir, stop_budget_seconds,',
    'log_limit_bytes (per stream, default 1 GiB) and allowed_http_statuses. Environment values may reference this process\'s variables only as the whole string',
    '"${NAME}"; resolved values are passed to the container and never written anywhere.',
    '',
    'The pair gets the batch lifecycle: receipt first, container created with labels, init, no-new-privileges;',
    'stdout/stderr streamed (redacted) to files; wall budget with a controlled stop (SIGTERM, stop budget, kill);',
    'outcome and Codex sessions collected; then the container is removed and its absence verified.',
    '',
    'Exit codes: 0 classification "completed" and the slot released; 1 any other classification, a held slot or a',
    'runtime failure (the receipt is still written and printed); 2 invalid spec, unset referenced variable or one under 8 characters; 3 no Docker engine.',
  ].join('\n');
  static override examples = [
    '<%= config.bin %> pair run --spec pair.json',
    'OPENAI_API_KEY=... <%= config.bin %> pair run --spec pair.json --output ./run-1 --json',
  ];
  static override flags = {
    spec: Flags.string({ description: 'path of the pair spec JSON ("-" for stdin)', required: true }),
    output: Flags.string({ description: 'directory for receipt, logs, sessions and result.json (must be new or empty; default: a new directory here)' }),
    'bind-address': Flags.string({ description: 'host IP address that published ports bind to (one this host has, or 0.0.0.0)', default: '127.0.0.1' }),
    registry: Flags.string({ description: 'host capacity registry: an existing registry, or a new file in an existing folder (default $XDG_STATE_HOME/roboguide-eval/registry.db, created on first use)' }),
    'stop-budget': Flags.integer({ description: 'seconds between SIGTERM and kill in a controlled stop (default: spec or 240)', min: 1 }),
    ...executorFlags,
    'allow-short-secrets': Flags.boolean({
      description: 'accept ${NAME} values shorter than 8 characters (refused otherwise); every occurrence is masked in all output, with a warning',
      default: false,
    }),
  };

  async run(): Promise<ResultRecord & { output: string }> {
    const { flags } = await this.parse(PairRun);
    const executor = executorFromFlags(flags); // bad executor flags: exit 2 before anything is read or written
    let specText: string;
    try {
      specText = flags.spec === '-' ? await readStdin() : await readFile(flags.spec, 'utf8');
    } catch (err) {
      throw new InvalidInputError('E_SPEC_INVALID', `cannot read pair spec ${flags.spec}`, [
        { path: '$', rule: `cannot read file: ${(err as NodeJS.ErrnoException).code ?? 'error'}` },
      ]);
    }
    const registry = registryLocation(flags.registry); // a URL other than PostgreSQL's is refused here, before anything else
    const deps = createPairRunDeps(registry, specLogSecrets(specText), executor);
    // SIGINT/SIGTERM (a backend adapter cancelling us): controlled stop of the container, then the usual
    // collection and verified removal; the signal is re-raised once the evidence is written.
    const terminate = new AbortController();
    let received: NodeJS.Signals | null = null;
    const onSignal = (signal: NodeJS.Signals): void => {
      if (received === null) process.stderr.write(`${signal}: stopping the pair (stop budget), then removing its container…\n`);
      received = signal;
      terminate.abort();
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    let outcome: RunPairOutcome;
    try {
      outcome = await runPair(deps, {
        specText,
        specSource: flags.spec,
        ...(flags.output !== undefined ? { output: flags.output } : {}),
        bindAddress: flags['bind-address'],
        ...(flags['stop-budget'] !== undefined ? { stopBudgetSec: flags['stop-budget'] } : {}),
        environment: process.env,
        codeVersion: () => readCodeVersion(PACKAGE_ROOT),
        cwd: process.cwd(),
        hostAddresses: hostAddresses(),
        hostPaths: hostProtectedPaths(),
        ...(registryFilePath(registry) !== undefined ? { registryPath: registry.path } : {}),
        terminate: terminate.signal,
        allowShortSecrets: flags['allow-short-secrets'],
        onWarning: (message) => this.warn(message),
      });
    } catch (err) {
      reraise(received);
      throw err;
    } finally {
      await deps.dispose();
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    }
    const { result, output, reconciliation } = outcome;
    const released = reconciliation.kind === 'committed' || reconciliation.kind === 'already_committed';
    if (result.classification !== 'completed' || !released) process.exitCode = 1;
    this.log(`pair ${result.job_id}: ${result.classification}${result.reasons.length ? ` (${result.reasons.join(', ')})` : ''}`);
    this.log(`  container ${result.container.id ?? '-'} exit ${result.container.exit_code ?? '-'}; removed and verified absent: ${result.cleanup.verified_absent}`);
    this.log(`  logs: stdout ${result.logs.stdout.bytes} B, stderr ${result.logs.stderr.bytes} B; sessions ${result.sessions.files} file(s)`);
    if (result.provider_failure) this.log(`  provider failure: ${result.provider_failure.kind} (HTTP ${result.provider_failure.http_status ?? '?'})`);
    if (result.engine_error) this.logToStderr(`  engine: ${result.engine_error.message}`);
    this.log(`  evidence: ${output}`);
    if (!released) {
      const registry = flags.registry !== undefined ? ` --registry ${flags.registry}` : '';
      this.logToStderr(`  capacity slot kept (${reconciliation.reason ?? reconciliation.kind}): ${reconciliation.detail}; finish with \`reconcile --output ${output}${registry} --execute\``);
    }
    reraise(received);
    return { ...result, output };
  }
}

/** After the evidence is written and printed, exit by the signal that interrupted us (as a shell expects). */
function reraise(signal: NodeJS.Signals | null): void {
  if (signal !== null) setImmediate(() => process.kill(process.pid, signal));
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}
