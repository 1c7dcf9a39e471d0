import { isBatchRecord } from './app/batch/layout.js';
import { resolve } from 'node:path';
import { format } from 'node:util';
import { engineUnixSocket, probeContainersByLabel, probeImageId } from './adapters/docker/engine-probe.js';
import { NodeFileSystem } from './adapters/fs/node-file-system.js';
import { procHostIdentity } from './adapters/host-identity.js';
import { EvidenceStore } from './app/evidence/evidence-store.js';
import { movedImages } from './app/batch/image-pins.js';
import { BATCH_FILE } from './core/evidence-names.js';
import { readHotStatus } from './app/batch/read-status.js';
import { withRunningEgress } from './app/batch/running-egress.js';
import { renderStatus } from './cli/status-view.js';
import { userCommand } from './adapters/user-command.js';
import { batchFailed } from './core/batch-verdict.js';
import { ExitCode } from './core/errors.js';
import { PAIRS_NETWORK_VARIABLE, pairsNetworkSetting } from './core/pair-network.js';
import { jsonTerminalSafe, terminalSafe } from './core/terminal-text.js';

/** The longest an engine call of the fast path may take before the full command is left to answer. */
const ENGINE_TIMEOUT_MS = 5_000;

interface StatusFlags {
  readonly output: string;
  readonly json: boolean;
  readonly exitStatus: boolean;
}

/** The flags of the plain cases only (each at most once); anything else (`--watch`, `--help`, a typo…) is oclif's. */
function parseFlags(argv: readonly string[]): StatusFlags | null {
  let output: string | undefined;
  let json = false;
  let exitStatus = false;
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i]!;
    if (arg === '--json' && !json) json = true;
    else if (arg === '--exit-status' && !exitStatus) exitStatus = true;
    else if (
      arg === '--output' &&
      output === undefined &&
      i + 1 < argv.length &&
      !argv[i + 1]!.startsWith('-')
    )
      output = argv[(i += 1)];
    else if (arg.startsWith('--output=') && output === undefined) output = arg.slice('--output='.length);
    else return null;
  }
  return output === undefined || output === '' ? null : { output, json, exitStatus };
}

/**
 * `e1-batch status` of a batch whose supervisor is alive, answered from its status.json and the journal past it
 * (SPEC §6.11, "hot") without loading oclif, dockerode, zod or the command root: what an operator polls must start
 * in the Node floor's time (docs/benchmarks.md, status). The engine is asked over its unix socket with plain HTTP
 * (the batch's containers, the pinned images), as the command's runtime would ask it.
 *
 * Returns false, having printed nothing, whenever it is not that plain case (other flags, a swarm batch, an engine
 * not on a unix socket or not answering, a supervisor not alive, status.json unusable, any error): `bin/run.js`
 * then runs the command itself, which gives the same answer, or the error, the full way.
 */
export async function runStatusFast(argv: readonly string[]): Promise<boolean> {
  try {
    const flags = parseFlags(argv);
    // An invalid ROBOGUIDE_PAIRS_NETWORK is refused by the command's runtime (exit 2): left to it.
    if (flags === null || !pairsNetworkSetting(process.env[PAIRS_NETWORK_VARIABLE]).ok) return false;
    if (flags.json && process.stdout.isTTY) return false; // oclif may colour JSON on a terminal
    const store = new EvidenceStore(new NodeFileSystem(), resolve(flags.output));
    const batch = await store.readJson(BATCH_FILE, isBatchRecord);
    if (batch === null || (batch.executor !== undefined && batch.executor.kind !== 'local')) return false;
    const socket = await engineUnixSocket();
    if (socket === null) return false;
    const engine = {
      listByLabel: (labels: Readonly<Record<string, string>>) =>
        probeContainersByLabel(socket, labels, ENGINE_TIMEOUT_MS),
      imageId: (image: string) => probeImageId(socket, image, ENGINE_TIMEOUT_MS),
    };
    // The command's movedImages forgives a failed inspect (the tag counts as not moved): so does this one.
    const [status, moved] = await Promise.all([
      readHotStatus(store, engine, new Date(), procHostIdentity),
      movedImages(batch, engine),
    ]);
    if (status === null) return false;
    const live = await withRunningEgress(store, status);
    const answer = moved.length > 0 ? { ...live, images_moved: moved } : live;
    const text = flags.json
      ? jsonTerminalSafe(JSON.stringify(answer, undefined, 2))
      : terminalSafe(renderStatus(answer, new Date(), { bin: userCommand(), output: flags.output }));
    // As the commands print (BaseCommand's `log`, `logJson`): console.log of util.format of the inert text.
    console.log(format(text));
    if (flags.exitStatus && batchFailed(answer)) process.exitCode = ExitCode.batchFailed;
    return true;
  } catch {
    return false;
  }
}
