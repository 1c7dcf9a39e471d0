import { Command } from '@oclif/core';
import { userCommand } from '../adapters/user-command.js';
import { InvalidInputError, RoboguideError } from '../core/errors.js';

/**
 * Base of every command: `--json` on all of them, and one place that turns a RoboguideError
 * into its exit code (SPEC §2) and a message (human) or `{error:{…}}` (JSON).
 */
export abstract class BaseCommand extends Command {
  static override enableJsonFlag = true;

  /** The command the user ran (`bin/roboguide-eval`, or the installed binary's name): what hints tell them to run. */
  protected get userBin(): string {
    return userCommand();
  }

  protected override async catch(err: Error & { exitCode?: number }): Promise<unknown> {
    if (!(err instanceof RoboguideError)) return super.catch(err);
    process.exitCode = err.exitCode;
    if (this.jsonEnabled()) {
      this.logJson(this.toErrorJson(err));
      return undefined;
    }
    const lines = [`Error (${err.code}): ${err.message}`];
    for (const s of err.suggestions) lines.push(`  Try: ${s}`);
    process.stderr.write(`${lines.join('\n')}\n`);
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
    return super.toErrorJson(err);
  }
}
