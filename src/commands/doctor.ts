import { homedir } from 'node:os';
import { resolve } from 'node:path';
import * as Flags from '@oclif/core/flags';
import { mountRootFlags, mountRootsFrom } from '../cli/flags.js';
import { renderDoctorTable, runDoctor } from '../app/doctor/run-doctor.js';
import { type DoctorCheck } from '../app/doctor/check.js';
import { loadManifest } from '../app/load-manifest.js';
import { batchOutputNeedBytes } from '../core/output-budget.js';
import { PAIR_DRIVER_IMAGE } from '../core/synthetic-images.js';
import { BaseCommand } from '../cli/base-command.js';
import { createDoctorWiring, localFileSystem } from '../command-root.js';

export interface DoctorJson {
  readonly schema: 'roboguide.doctor/v1';
  readonly exit_code: number;
  readonly engine_reachable: boolean;
  readonly checks: readonly DoctorCheck[];
}

export default class Doctor extends BaseCommand {
  static override summary =
    'Check this host: engine, images, NVIDIA runtime, pairs network, GPUs, registry, disk, boot id.';
  static override description = [
    'Each check is ok, warn or fail; the fix is printed under every line that is not ok.',
    'Checks: the Docker engine answers (version, API version); the images are present locally (default: the',
    `pair-driver image ${PAIR_DRIVER_IMAGE}); the engine lists an "nvidia" runtime; with --probe-gpu, a container`,
    'requesting gpus "all" starts and exits (labelled roboguide.doctor=probe, always removed); GPUs and memory from',
    'nvidia-smi; the capacity registry is writable (a scratch write inside a transaction that is rolled back: nothing',
    'is added to it); free space on the output filesystem (warn under 5 GiB, fail under 512 MiB); the boot id.',
    'The pairs network: roboguide-pairs ours with inter-container traffic off and our iptables chain ROBOGUIDE-PAIRS',
    'with its jumps in place (warn before the first pair set it up or under ROBOGUIDE_PAIRS_NETWORK=engine-bridge).',
    'Host facts (systeminformation, each bounded in time, "unknown" when slow or failing): CPU, memory, OS; the file',
    "systems of the output directory and of the engine's data root (warn under 5 GiB free); the NVIDIA controllers on",
    "the PCI bus against nvidia-smi's GPU count (a different count warns). --json adds them as each check's facts.",
    'The OCI runtimes the engine registers (a job\'s "runtime" may name one), and how to register gVisor (runsc) when it',
    'is not; with --probe-runtime NAME, a container under it prints its kernel (gVisor: 4.4.0), always removed.',
    '',
    'Exit codes: 0 no failure (warnings allowed); 1 a check failed; 3 no Docker engine answers.',
  ].join('\n');
  static override examples = [
    '<%= config.bin %> doctor',
    '<%= config.bin %> doctor --probe-gpu --images roboguide/pair-driver:1,my-driver:2 --output /data/batches --json',
    '<%= config.bin %> doctor --probe-runtime runsc',
  ];
  static override flags = {
    images: Flags.string({
      description: 'comma-separated images that must be present locally (the first one runs the GPU probe)',
    }),
    'probe-gpu': Flags.boolean({
      description: 'start a short container requesting gpus "all" to prove GPU jobs can start',
      default: false,
    }),
    registry: Flags.string({
      description:
        'registry database to check (default: the host registry if it exists, else a scratch database)',
    }),
    output: Flags.string({
      description: 'directory whose filesystem needs free space (default: the current directory)',
    }),
    ...mountRootFlags,
    'probe-runtime': Flags.string({
      description:
        'run a short container under this OCI runtime (e.g. runsc) and report the kernel it sees (gVisor: 4.4.0)',
    }),
    manifest: Flags.string({
      description:
        "batch manifest: warn when --output's filesystem has less free space than its log and session caps could need",
    }),
  };

  async run(): Promise<DoctorJson> {
    const { flags } = await this.parse(Doctor);
    const images =
      flags.images
        ?.split(',')
        .map((i) => i.trim())
        .filter((i) => i !== '') ?? [];
    // A URL other than PostgreSQL's is refused (exit 2) before anything is probed.
    const mountRoots = await mountRootsFrom(flags['mount-root'], flags['mount-root-only']);
    const wiring = await createDoctorWiring(flags.registry);
    const report = await runDoctor(wiring.deps, {
      images: images.length > 0 ? images : [PAIR_DRIVER_IMAGE],
      probeGpu: flags['probe-gpu'],
      ...(flags['probe-runtime'] !== undefined ? { probeRuntime: flags['probe-runtime'] } : {}),
      bin: this.userBin,
      ...wiring.registry,
      outputDir: resolve(flags.output ?? process.cwd()),
      mountRoots,
      homeDir: homedir(),
      ...(await manifestFacts(flags.manifest, wiring.sessionsMaxBytes)),
    });
    process.exitCode = report.exitCode;
    this.log(renderDoctorTable(report));
    return {
      schema: 'roboguide.doctor/v1',
      exit_code: report.exitCode,
      engine_reachable: report.engineReachable,
      checks: report.checks,
    };
  }
}

/** With `--manifest`: the bytes its logs and sessions could need, and its image budget (issue 43). */
async function manifestFacts(
  path: string | undefined,
  sessionsMaxBytes: number,
): Promise<{ batchNeedBytes: number | null; imageDiskBytes: number | null }> {
  if (path === undefined) return { batchNeedBytes: null, imageDiskBytes: null };
  const { manifest } = await loadManifest(localFileSystem, path);
  return {
    batchNeedBytes: batchOutputNeedBytes(manifest.jobs, sessionsMaxBytes),
    imageDiskBytes: manifest.capacity.image_disk_bytes ?? null,
  };
}
