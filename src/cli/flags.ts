import { Flags } from '@oclif/core';

/**
 * Flags that several commands share word for word (help text included). A flag whose description differs between
 * commands stays in its command: `--help` is part of the interface.
 */

/** `--output` of the commands that act on an existing batch (stop, status, report, resume, node-down). */
export const batchOutputFlag = Flags.string({ description: 'batch output directory', required: true });

/** `--registry` of the commands that admit pairs (`e1-batch start`, `pair run`). */
export const admissionRegistryFlag = Flags.string({
  description:
    'host capacity registry: an existing registry, or a new file in an existing folder (default $XDG_STATE_HOME/roboguide-eval/registry.db, created on first use)',
});

/** `--allow-short-secrets` of `e1-batch start` and `pair run`. */
export const allowShortSecretsFlag = Flags.boolean({
  description: 'accept ${NAME} values shorter than 8 characters (refused otherwise); every occurrence is masked in all output, with a warning',
  default: false,
});

/** The `--executor`, `--manager` and `--node-engine` flags, the same on `e1-batch start`, `pair run` and `serve`. */
export const executorFlags = {
  executor: Flags.string({ description: 'where pairs run: local (this host\'s engine) or swarm (Docker Swarm through --manager)', default: 'local' }),
  manager: Flags.string({ description: 'with --executor swarm: the swarm manager\'s engine (unix:///path, tcp://host:port[?ca=&cert=&key=], ssh://user@host)' }),
  'node-engine': Flags.string({
    description: 'with --executor swarm, repeatable: NODE=URL, the engine of swarm node NODE (hostname or id); outcome and sessions are read back and removals verified through it',
    multiple: true,
  }),
};
