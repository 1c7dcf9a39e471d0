import { format } from 'node:util';
import { Command } from '@oclif/core/command';
import { Config } from '@oclif/core/config';
import type { LoadOptions } from '@oclif/core/interfaces';
import { colorizeJson, stdout } from '@oclif/core/ux';
import { userCommand } from '../adapters/user-command.js';
import { ExitCode, InvalidInputError, RoboguideError } from '../core/errors.js';
import { jsonTerminalSafe, terminalSafe } from '../core/terminal-text.js';

/**
 * Base of every command: `--json` on all of them, and one place that turns a RoboguideError
 * into its exit code (SPEC §2) and a message (human) or `{error:{…}}` (JSON).
 *
 * Also the one choke point of what a command prints: `log`, `logToStderr`, `warn`, the error rendering and
 * `logJson` pass their text through core/terminal-text.ts, so an engine message, an image's `USER`, a job id or an
 * outcome string holding ESC sequences, CR or other controls is shown escaped (`\x1b`), never run by the terminal.
 */
export abstract class BaseCommand extends Command {
  static override enableJsonFlag = true;

  /**
   * oclif's static `run`, taking the config oclif loaded for this process as it is when it is given one (what
   * `execute` does). oclif 5 loads a second one from it for the command (its plugins, commands and topics again, the
   * theme file read again, the shell and platform asked again: its way to run a command built on another oclif), and
   * the bundle has one oclif, shared by every command (scripts/bundle-cli.js): 5 to 10 ms of a `pair run`'s start
   * (issue 39). Anything else (a root path, a test's own config of another oclif): oclif's way.
   */
  static override async run<T extends Command>(
    this: new (argv: string[], config: Config) => T,
    argv?: string[],
    opts?: LoadOptions,
  ): Promise<ReturnType<T['run']>> {
    if (!(opts instanceof Config))
      return (Command.run as typeof BaseCommand.run).call(this, argv, opts) as never;
    const command = new this(argv ?? process.argv.slice(2), opts) as unknown as BaseCommand;
    if (!command.id) {
      // As oclif names a command class run by itself (not found through a config's manifest).
      const id = command.constructor.name.toLowerCase();
      command.id = id;
      (command.constructor as typeof Command).id = id;
    }
    return command._run<Awaited<ReturnType<T['run']>>>();
  }

  /** The command the user ran (`bin/roboguide-eval`, or the installed binary's name): what hints tell them to run. */
  protected get userBin(): string {
    return userCommand();
  }

  override log(message = '', ...args: unknown[]): void {
    super.log(terminalSafe(format(message, ...args)));
  }

  override logToStderr(message = '', ...args: unknown[]): void {
    super.logToStderr(terminalSafe(format(message, ...args)));
  }

  override warn(input: string | Error): string | Error {
    if (typeof input === 'string') return super.warn(terminalSafe(input));
    input.message = terminalSafe(input.message);
    return super.warn(input);
  }

  protected override logJson(json: unknown): void {
    // JSON already escapes C0 controls; DEL, C1 and the reordering characters become \u escapes (same value).
    stdout(jsonTerminalSafe(colorizeJson(json, { pretty: true, theme: this.config.theme?.json })));
  }

  protected override async catch(err: Error & { exitCode?: number }): Promise<unknown> {
    if (!(err instanceof RoboguideError)) {
      // oclif prints these itself (message, or the stack for an unexpected error): made inert first.
      err.message = terminalSafe(err.message);
      if (err.stack !== undefined) err.stack = terminalSafe(err.stack);
      return super.catch(err);
    }
    process.exitCode = err.exitCode;
    if (this.jsonEnabled()) {
      this.logJson(this.toErrorJson(err));
      return undefined;
    }
    const lines = [`Error (${err.code}): ${err.message}`];
    for (const s of err.suggestions) lines.push(`  Try: ${s}`);
    process.stderr.write(`${terminalSafe(lines.join('\n'))}\n`);
    return undefined;
  }

  protected override toErrorJson(err: unknown): unknown {
    if (err instanceof RoboguideError) {
      return {
        error: {
          code: err.code,
          message: err.message,
          exit_code: err.exitCode,
          ...(err instanceof InvalidInputError ? { issues: err.issues } : {}),
          ...(err.suggestions.length > 0 ? { suggestions: err.suggestions } : {}),
        },
      };
    }
    // oclif's own refusals (an unknown flag, a missing required one: exit 2) and anything unexpected, in the same
    // shape: never oclif's default, which spreads the error's fields (its parser's whole input, configuration and
    // command manifest included: about 190 KB for a mistyped flag) and names no code.
    // oclif's catch has set the process's exit code by now (one set before it wins): the object says that one.
    const exitCode = typeof process.exitCode === 'number' ? process.exitCode : exitCodeOf(err);
    return {
      error: {
        code: exitCode === ExitCode.invalidInput ? 'E_USAGE' : 'E_INTERNAL',
        message: err instanceof Error ? err.message : String(err),
        exit_code: exitCode,
      },
    };
  }
}

/** The exit code oclif gives an error that is not ours (its `oclif.exit`, else `exitCode`, else 1), as its catch does. */
function exitCodeOf(err: unknown): number {
  const { oclif, exitCode } = (typeof err === 'object' && err !== null ? err : {}) as {
    oclif?: { exit?: unknown };
    exitCode?: unknown;
  };
  const code = oclif?.exit ?? exitCode;
  return typeof code === 'number' && Number.isInteger(code) ? code : 1;
}
