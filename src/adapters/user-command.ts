import { delimiter } from 'node:path';
import { invokedAs } from '../core/invoked-as.js';

/** The command this process was started as, for hints (see core/invoked-as.ts). */
export function userCommand(
  env: NodeJS.ProcessEnv = process.env,
  argv: readonly string[] = process.argv,
  cwd: string = process.cwd(),
): string {
  return invokedAs({
    launcher: env.ROBOGUIDE_EVAL_BIN,
    script: argv[1],
    pathDirs: (env.PATH ?? '').split(delimiter).filter((d) => d !== ''),
    cwd,
  });
}
