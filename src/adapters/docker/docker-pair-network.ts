import { systemTool } from '../system-tool.js';
import { execFile } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import type Docker from 'dockerode';
import type { PairNetworkGuard } from '../../app/ports/pair-network.js';
import { RoboguideError } from '../../core/errors.js';
import {
  PAIRS_CHAIN,
  PAIRS_NETWORK,
  PAIRS_NETWORK_LABELS,
  PAIRS_NETWORK_OPTIONS,
  chainListingMatches,
  missingOf,
  readFilterTable,
  type FilterTableState,
  chainRules,
  jumpChains,
  jumpRule,
  pairsNetworkProblem,
  type IpFamily,
  type PairsNetworkReport,
} from '../../core/pair-network.js';
import { statusOf, toEngineError } from './engine-error.js';
import { NetfilterWatch, type RulesetWatch } from './ruleset-watch.js';
import { captureInToolShell } from '../mount/proc-fd-stager.js';

const IPTABLES_TIMEOUT_MS = 30_000;
const CALL_TIMEOUT_MS = 60_000;
const FAMILIES: readonly IpFamily[] = ['ipv4', 'ipv6'];
/** `iptables -D` of a jump until none is left: a race of two `ensure` may have inserted it twice. Bounded. */
const MAX_JUMP_COPIES = 16;

export interface IptablesResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `iptables` (ipv4) or `ip6tables` (ipv6) with these arguments in the engine's network namespace. */
export type IptablesRunner = (family: IpFamily, args: readonly string[]) => Promise<IptablesResult>;

/**
 * The real runner: `iptables -w …` / `ip6tables -w …`, after `prefix` when given (the tests run it inside the
 * throwaway engine's namespace: `nsenter --net=/run/netns/NS`). A missing binary is an E_NETWORK error saying so.
 * Run by the process's tool shell (src/adapters/mount/tool-shell.ts, issue 39): a fork of this process costs in
 * proportion to its size (about 13 ms each on a 2-core machine, two a `pair run`), the shell's next to nothing. With
 * the tools' fixed environment (C messages, the system folders); a process of its own, as before, where the shell is
 * not to be used.
 */
export function iptablesRunner(prefix: readonly string[] = []): IptablesRunner {
  return (family, args) => {
    const binary = systemTool(family === 'ipv4' ? 'iptables' : 'ip6tables');
    // From the system folders only, the prefix's program too (never the caller's PATH: docs/secrets.md).
    const [prefixTool, ...prefixArgs] = prefix;
    const argv = [
      ...(prefixTool !== undefined ? [systemTool(prefixTool), ...prefixArgs] : []),
      binary,
      '-w',
      ...args,
    ];
    const [file = binary, ...rest] = argv;
    // A program that is not there is the old way's E_NETWORK error, which names it.
    if (!executable(file)) return runIptablesProcess(file, rest, IPTABLES_TIMEOUT_MS);
    return captureInToolShell(file, rest, IPTABLES_TIMEOUT_MS, runIptablesProcess);
  };
}

function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** `iptables` in a process of its own (execFile), the caller's environment. */
function runIptablesProcess(
  file: string,
  rest: readonly string[],
  timeoutMs: number,
): Promise<IptablesResult> {
  return new Promise((resolve, reject) => {
    execFile(file, rest, { timeout: timeoutMs, encoding: 'utf8' }, (err, stdout, stderr) => {
      if (err === null) return resolve({ code: 0, stdout, stderr });
      const e = err as NodeJS.ErrnoException & { code?: unknown };
      if (e.code === 'ENOENT') {
        return reject(
          new RoboguideError(
            'E_NETWORK',
            `${file} is not installed: the pairs network's firewall rules cannot be set`,
            {
              suggestions: [
                'install iptables (Debian: `apt-get install iptables`)',
                'or run the pairs with network "none"',
                "or, knowing what it opens, ROBOGUIDE_PAIRS_NETWORK=engine-bridge (the engine's default bridge, unguarded)",
              ],
            },
          ),
        );
      }
      resolve({ code: typeof e.code === 'number' ? e.code : 1, stdout, stderr });
    });
  });
}

/** How old a listing begun by `prepare` may be when `ensure` takes it (a `pair run`'s checks take well under 1 s). */
const PREPARED_LISTING_MAX_AGE_MS = 5_000;

/** What the pairs network's inspect says of it. */
interface NetworkFacts {
  readonly driver: string;
  readonly labels: Record<string, string>;
  readonly options: Record<string, string>;
}

/** The network on the engine, the chain in iptables and ip6tables (src/core/pair-network.ts says what and why). */
export class DockerPairNetwork implements PairNetworkGuard {
  readonly #docker: Docker;
  readonly #iptables: IptablesRunner;
  readonly #watch: RulesetWatch | null;
  /** The watch's mark taken before the last listing that found every rule in place; null: list at the next create. */
  #verified: number | null = null;
  #listings = 0;
  /** The first listing, begun by `prepare` (at `atMs`) and not yet taken by `ensure`: whether every rule was in place. */
  #prepared: {
    readonly atMs: number;
    readonly complete: Promise<boolean>;
    readonly inspected: Promise<NetworkFacts | null>;
  } | null = null;

  /**
   * `watch`: what spares the listing while the ruleset is unchanged (issue 39). By default, with the default runner, the
   * kernel's change feed in this process's namespace; with a runner of the caller's, none unless given
   * (`rulesetWatchFor(prefix, runner)` gives the one of the runner's namespace).
   */
  constructor(docker: Docker, iptables?: IptablesRunner, watch?: RulesetWatch | null) {
    this.#docker = docker;
    this.#iptables = iptables ?? iptablesRunner();
    this.#watch =
      watch !== undefined ? watch : iptables === undefined ? rulesetWatchFor([], this.#iptables) : null;
  }

  async ensure(): Promise<void> {
    // Issue 39: the rules were all in place at a mark and the kernel's change feed has reported no change since (no
    // rule removed, no chain flushed, no table dropped, by anyone): nothing to list. Otherwise listed as below.
    const verified = this.#verified;
    if (verified !== null && this.#watch !== null && (await this.#watch.unchangedSince(verified))) {
      await this.#ensureNetwork();
      return;
    }
    this.#verified = null;
    // Taken before the listing: a change made while it runs is seen at the next create. Not on a process's first
    // create: a `pair run` creates one container, and starting the feed would only add to it.
    this.#listings += 1;
    const mark = this.#watch === null || this.#listings < 2 ? null : await this.#watch.mark();
    await this.#ensureListed();
    this.#verified = mark;
  }

  prepare(): void {
    // Only the process's first listing, which takes no mark of the watch (below): a later one is the watch's.
    if (this.#listings > 0 || this.#prepared !== null) return;
    const complete = this.#listRules();
    complete.catch(() => undefined); // the ensure that takes it reports the failure
    // The network's inspect beside it (a read: the network is only ever made once the rules are in place).
    const inspected = this.#inspect();
    inspected.catch(() => undefined);
    this.#prepared = { atMs: performance.now(), complete, inspected };
  }

  async #ensureListed(): Promise<void> {
    // Rules first, so that the bridge never exists unguarded. An engine creates DOCKER-USER with its first bridge
    // network: when it is missing still, that jump is added once our network exists (no container is on it before
    // this returns).
    // A listing prepared longer ago than a pair run's checks take is not taken: listed again.
    const prepared = this.#prepared;
    this.#prepared = null;
    const fresh = prepared !== null && performance.now() - prepared.atMs <= PREPARED_LISTING_MAX_AGE_MS;
    // One too old may still run (a held xtables lock): it ends before the new one begins, or the two would take
    // turns in the one tool shell, each making what it found missing.
    if (prepared !== null && !fresh) await prepared.complete.catch(() => undefined);
    // The network's inspect runs beside the listing (issue 39): a network found missing is made after the rules.
    const inspected = fresh ? prepared.inspected : this.#inspect();
    inspected.catch(() => undefined);
    const complete = await (fresh ? prepared.complete : this.#listRules());
    await this.#ensureNetwork(inspected);
    if (!complete) await Promise.all(FAMILIES.map((family) => this.#ensureRules(family, false)));
  }

  /**
   * Each family's rules listed and what is missing of ours made; true when all were in place. The two families are
   * separate tables (iptables and ip6tables, each waiting for the xtables lock): checked side by side, which spares
   * every pair run one round of process spawns.
   */
  async #listRules(): Promise<boolean> {
    return (await Promise.all(FAMILIES.map((family) => this.#ensureRules(family, true)))).every(Boolean);
  }

  async check(): Promise<PairsNetworkReport> {
    const facts = await this.#inspect();
    const network: PairsNetworkReport['network'] =
      facts === null
        ? { state: 'missing' }
        : ((problem) =>
            problem === null ? { state: 'ok' as const } : { state: 'foreign' as const, problem })(
            pairsNetworkProblem(facts),
          );
    const rules: PairsNetworkReport['rules'][number][] = [];
    for (const family of FAMILIES) {
      const missing = missingOf(await this.#table(family));
      rules.push({ family, ok: missing.length === 0, missing });
    }
    return { network, rules };
  }

  async remove(): Promise<{ network: 'removed' | 'absent'; rules: 'removed' | 'absent' }> {
    this.#verified = null;
    const network = await this.#removeNetwork();
    let removed = false;
    for (const family of FAMILIES) removed = (await this.#removeRules(family)) || removed;
    return { network, rules: removed ? 'removed' : 'absent' };
  }

  async #inspect(): Promise<NetworkFacts | null> {
    try {
      // dockerode's network inspect takes no abort signal: bounded here instead.
      const info = (await withinDeadline(
        this.#docker.getNetwork(PAIRS_NETWORK).inspect() as Promise<unknown>,
        CALL_TIMEOUT_MS,
      )) as {
        Name?: string;
        Driver?: string;
        Labels?: Record<string, string> | null;
        Options?: Record<string, string> | null;
      };
      // The engine resolves a name by id prefix too: only the network of that exact name counts.
      if (info.Name !== PAIRS_NETWORK) return null;
      return { driver: info.Driver ?? '', labels: info.Labels ?? {}, options: info.Options ?? {} };
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw toEngineError(err, 'inspect a network', PAIRS_NETWORK);
    }
  }

  /** The network there and ours, made when missing; `inspected`: its inspect begun already. */
  async #ensureNetwork(inspected?: Promise<NetworkFacts | null>): Promise<void> {
    let facts = await (inspected ?? this.#inspect());
    if (facts === null) {
      try {
        await this.#docker.createNetwork({
          Name: PAIRS_NETWORK,
          Driver: 'bridge',
          CheckDuplicate: true,
          Internal: false,
          Attachable: false,
          Labels: { ...PAIRS_NETWORK_LABELS },
          Options: { ...PAIRS_NETWORK_OPTIONS },
          abortSignal: AbortSignal.timeout(CALL_TIMEOUT_MS),
        });
      } catch (err) {
        // Another process created it meanwhile (409, or 403 "networks have same bridge name" when both passed the
        // engine's name check): it is there now, and checked below like any existing one.
        if (statusOf(err) !== 409 && (await this.#inspect()) === null)
          throw toEngineError(err, 'create a network', PAIRS_NETWORK);
      }
      facts = await this.#inspect();
      if (facts === null)
        throw new RoboguideError(
          'E_NETWORK',
          `network ${PAIRS_NETWORK} was created but the engine does not show it`,
        );
    }
    const problem = pairsNetworkProblem(facts);
    if (problem !== null) {
      throw new RoboguideError('E_NETWORK', `${problem}: pairs are not started on it`, {
        suggestions: [
          `remove it (\`docker network rm ${PAIRS_NETWORK}\`, once no container uses it); the next pair creates ours`,
          'or run the pairs with network "none"',
        ],
      });
    }
  }

  /** False when a chain to jump from is missing and `waitForEngineChains` allows it (DOCKER-USER before our network). */
  /** The filter table as `iptables -S` shows it: one call. */
  async #table(family: IpFamily): Promise<FilterTableState> {
    const listing = await this.#iptables(family, ['-S']);
    if (listing.code !== 0) throw this.#failure(family, 'list the filter table', listing);
    return readFilterTable(family, listing.stdout);
  }

  async #ensureRules(family: IpFamily, waitForEngineChains: boolean): Promise<boolean> {
    // The usual case, on every create: everything in place, seen in one listing.
    const table = await this.#table(family);
    if (table.chain === 'ok' && Object.values(table.jumps).every(Boolean)) return true;
    const listing = await this.#iptables(family, ['-S', PAIRS_CHAIN]);
    if (listing.code !== 0) {
      const created = await this.#iptables(family, ['-N', PAIRS_CHAIN]);
      // Another process may have created it between the listing and here: re-read below.
      if (created.code !== 0 && (await this.#iptables(family, ['-S', PAIRS_CHAIN])).code !== 0) {
        throw this.#failure(family, `create chain ${PAIRS_CHAIN}`, created);
      }
    }
    const now = await this.#iptables(family, ['-S', PAIRS_CHAIN]);
    if (!chainListingMatches(family, now.stdout)) {
      // A chain from an older version, or edited by hand: rewritten whole. The jumps to it are added only after.
      await this.#must(family, ['-F', PAIRS_CHAIN], `flush chain ${PAIRS_CHAIN}`);
      for (const rule of chainRules(family))
        await this.#must(family, ['-A', PAIRS_CHAIN, ...rule], `add a rule to ${PAIRS_CHAIN}`);
    }
    let complete = true;
    for (const chain of jumpChains(family)) {
      if (await this.#hasJump(family, chain)) continue;
      const exists = await this.#iptables(family, ['-S', chain]);
      if (exists.code !== 0 && waitForEngineChains) {
        complete = false;
        continue;
      }
      if (exists.code !== 0) {
        throw new RoboguideError(
          'E_NETWORK',
          `${binaryOf(family)} has no chain ${chain}: the engine does not manage its own firewall rules (dockerd --iptables=false?), so the pairs network cannot keep its containers apart`,
          {
            suggestions: [
              'run dockerd with its iptables rules on (the default)',
              'or run the pairs with network "none"',
            ],
          },
        );
      }
      await this.#must(
        family,
        ['-I', chain, '1', ...jumpRule()],
        `insert the jump from ${chain} to ${PAIRS_CHAIN}`,
      );
    }
    return complete;
  }

  async #hasJump(family: IpFamily, chain: string): Promise<boolean> {
    return (await this.#iptables(family, ['-C', chain, ...jumpRule()])).code === 0;
  }

  async #removeNetwork(): Promise<'removed' | 'absent'> {
    const facts = await this.#inspect();
    if (facts === null) return 'absent';
    if (pairsNetworkProblem(facts)?.includes('is not ours') === true) {
      throw new RoboguideError(
        'E_NETWORK',
        `network ${PAIRS_NETWORK} is not ours (no label roboguide.network=pairs): left alone`,
      );
    }
    try {
      await this.#docker
        .getNetwork(PAIRS_NETWORK)
        .remove({ abortSignal: AbortSignal.timeout(CALL_TIMEOUT_MS) });
      return 'removed';
    } catch (err) {
      if (statusOf(err) === 404) return 'absent';
      if (statusOf(err) === 403 || statusOf(err) === 409) {
        throw new RoboguideError(
          'E_NETWORK',
          `network ${PAIRS_NETWORK} is in use by containers: it and its firewall rules are kept`,
          {
            cause: err,
            suggestions: ['wait for the running pairs and sessions to finish, then run it again'],
          },
        );
      }
      throw toEngineError(err, 'remove a network', PAIRS_NETWORK);
    }
  }

  /** The jumps (every copy), then the chain. True when something was removed. */
  async #removeRules(family: IpFamily): Promise<boolean> {
    let removed = false;
    for (const chain of jumpChains(family)) {
      for (let copy = 0; copy < MAX_JUMP_COPIES && (await this.#hasJump(family, chain)); copy += 1) {
        await this.#must(family, ['-D', chain, ...jumpRule()], `delete the jump from ${chain}`);
        removed = true;
      }
    }
    if ((await this.#iptables(family, ['-S', PAIRS_CHAIN])).code === 0) {
      await this.#must(family, ['-F', PAIRS_CHAIN], `flush chain ${PAIRS_CHAIN}`);
      await this.#must(family, ['-X', PAIRS_CHAIN], `delete chain ${PAIRS_CHAIN}`);
      removed = true;
    }
    return removed;
  }

  async #must(family: IpFamily, args: readonly string[], what: string): Promise<void> {
    const result = await this.#iptables(family, args);
    if (result.code !== 0) throw this.#failure(family, what, result);
  }

  #failure(family: IpFamily, what: string, result: IptablesResult): RoboguideError {
    return new RoboguideError(
      'E_NETWORK',
      `${binaryOf(family)} could not ${what}: ${result.stderr.trim() || `exit ${result.code}`} (the pairs network needs root; otherwise give the job network "none", or set ROBOGUIDE_PAIRS_NETWORK=engine-bridge to run pairs unguarded on the engine's bridge)`,
      {
        suggestions: [
          'run as root (iptables needs CAP_NET_ADMIN)',
          'or run the pairs with network "none"',
          "or, knowing what it opens, ROBOGUIDE_PAIRS_NETWORK=engine-bridge (the engine's default bridge, unguarded)",
        ],
      },
    );
  }
}

/**
 * The kernel's change feed in the namespace `runner` sets rules in (`prefix`: the same `nsenter` a test runner
 * uses), used only when that runner's iptables is the nf_tables backend (the legacy backend reports no change).
 */
export function rulesetWatchFor(prefix: readonly string[], runner: IptablesRunner): RulesetWatch {
  return new NetfilterWatch(prefix, async () => {
    const versions = await Promise.all(FAMILIES.map((family) => runner(family, ['-V'])));
    return versions.every((v) => v.code === 0 && v.stdout.includes('nf_tables'));
  });
}

function withinDeadline<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(
      () => reject(Object.assign(new Error(`no answer within ${ms} ms`), { name: 'TimeoutError' })),
      ms,
    );
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

function binaryOf(family: IpFamily): string {
  return family === 'ipv4' ? 'iptables' : 'ip6tables';
}
