import { isIP } from 'node:net';
import { resolve } from 'node:path';
import * as Flags from '@oclif/core/flags';
import { BaseCommand } from '../cli/base-command.js';
import { readTokenFile } from '../cli/token-file.js';
import { InvalidInputError } from '../core/errors.js';
import { startExporter } from '../metrics-root.js';

/** `HOST:PORT` with an IP literal (`[::1]:PORT` for IPv6) or `localhost`; whether it is loopback. */
function parseAddress(text: string): { host: string; port: number; loopback: boolean } {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(text);
  const host = m === null ? '' : (m[1] ?? (m[2] === 'localhost' ? '127.0.0.1' : (m[2] ?? '')));
  const port = Number(m?.[3]);
  if (m === null || isIP(host) === 0 || port > 65_535)
    throw new InvalidInputError('E_USAGE', 'invalid flags', [
      { path: '--listen', rule: 'must be HOST:PORT with an IP address (or localhost), e.g. 127.0.0.1:9464' },
    ]);
  const loopback = host === '::1' || host.startsWith('127.');
  return { host, port, loopback };
}

export default class Metrics extends BaseCommand {
  static override summary =
    "Export this host's batches and capacity registry to Prometheus (GET /metrics), read-only.";
  static override description = [
    'Reads, at each scrape, the batch folders under --batches (a batch folder, or a folder whose direct sub-folders',
    'are batches) and the capacity registry: status.json and the journal of each batch (from where the last scrape',
    "ended), each finished pair's result.json once, and the supervisor's liveness from /proc — never the",
    "supervisor's memory, so a crashed supervisor shows as down. Writes nothing. Every metric: docs/metrics.md.",
  ].join('\n');
  static override examples = [
    '<%= config.bin %> metrics --listen 127.0.0.1:9464 --batches /srv/batches',
    '<%= config.bin %> metrics --listen 10.0.0.5:9464 --token-file ~/.config/roboguide-eval/token --batches /srv/batches',
  ];
  static override flags = {
    listen: Flags.string({
      description:
        'HOST:PORT to serve GET /metrics on (an address other than loopback requires --token-file)',
      required: true,
    }),
    batches: Flags.string({
      description: 'a batch folder, or a folder whose direct sub-folders are batch folders (repeatable)',
      required: true,
      multiple: true,
    }),
    'token-file': Flags.string({
      description: 'file holding a bearer token every scrape must send (must not be group/world readable)',
    }),
    registry: Flags.string({
      description:
        'capacity registry (default $XDG_STATE_HOME/roboguide-eval/registry.db; "none": no registry series); never created',
    }),
    'max-batches': Flags.integer({
      description: 'export at most this many batches (the most recently changed)',
      default: 50,
      min: 1,
    }),
    'keep-ended': Flags.integer({
      description: 'seconds a drained or stopped batch stays exported after its files last changed',
      default: 3600,
      min: 0,
    }),
  };

  async run(): Promise<{ listening: string; port: number; registry: string | null; batches: string[] }> {
    const { flags } = await this.parse(Metrics);
    const address = parseAddress(flags.listen);
    const token = flags['token-file'] !== undefined ? await readTokenFile(flags['token-file']) : null;
    if (!address.loopback && token === null)
      throw new InvalidInputError('E_USAGE', 'invalid flags', [
        { path: '--token-file', rule: 'is required when --listen is not a loopback address' },
      ]);
    const roots = flags.batches.map((dir) => resolve(dir));
    const exporter = await startExporter({
      host: address.host,
      port: address.port,
      token,
      roots,
      maxBatches: flags['max-batches'],
      keepEndedSec: flags['keep-ended'],
      registryFlag: flags.registry,
    });
    const line = {
      listening: flags.listen,
      port: exporter.port,
      registry: exporter.registry,
      batches: roots,
    };
    // One machine-readable line on stdout: tests and service managers wait for it.
    this.log(JSON.stringify(line));
    await new Promise<void>((done) => {
      const stop = (): void => {
        process.off('SIGINT', stop);
        process.off('SIGTERM', stop);
        void exporter.close().finally(done);
      };
      process.on('SIGINT', stop);
      process.on('SIGTERM', stop);
    });
    return line;
  }
}
