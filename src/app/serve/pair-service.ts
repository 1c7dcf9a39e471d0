import { PAIRS_DIR, RECEIPT_FILE, RESULT_FILE } from '../../core/evidence-names.js';
import { randomUUID } from 'node:crypto';
import { dirname, join } from 'node:path';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import { parsePairSpec } from '../../core/manifest/parse.js';
import { checkMounts, type ProtectedPaths } from '../../core/mount-policy.js';
import { runPair } from '../pair/run-pair.js';
import type { RunPairDeps } from '../pair/run-pair-types.js';
import { ApiError, toApiError } from './api-error.js';
import { unallowedReferences } from './env-allow.js';
import { somethingAt } from '../job-paths.js';

interface PairRun {
  readonly pairId: string;
  readonly output: string;
  readonly terminate: AbortController;
  state: 'running' | 'finished' | 'failed';
  error: string | null;
  readonly done: Promise<void>;
}

export interface PairServiceDeps {
  readonly pairDeps: RunPairDeps;
  readonly store: EvidenceStore;
  /** Where `${NAME}` references resolve: the server's allowed variables only. */
  readonly environment: Readonly<Record<string, string | undefined>>;
  /** `serve --allow-env`: a reference to any other name is refused (400) before anything runs. */
  readonly allowedEnv: ReadonlySet<string>;
  readonly bindAddress: string;
  readonly codeVersion: string;
  readonly protectedPaths: ProtectedPaths;
}

export interface PairStatus {
  readonly pair_id: string;
  readonly state: 'running' | 'finished' | 'failed';
  readonly receipt: Record<string, unknown> | null;
  readonly result: Record<string, unknown> | null;
  readonly error: string | null;
}

/** Pairs through the API: exactly `pair run`'s lifecycle (runPair), evidence under `<data-dir>/pairs/<id>/`. */
export class PairService {
  readonly #deps: PairServiceDeps;
  readonly #pairs = new Map<string, PairRun>();

  constructor(deps: PairServiceDeps) {
    this.#deps = deps;
  }

  outputOf(pairId: string): string {
    if (!/^p-[0-9a-f-]{36}$/.test(pairId)) throw ApiError.notFound(`pair ${pairId}`);
    return this.#deps.store.resolve(join(PAIRS_DIR, pairId));
  }

  /** 202 once the receipt is published (the slot is held and the pair claimed); 400/409/503 before that. */
  async start(body: unknown): Promise<{ pair_id: string }> {
    await this.#checkSpec(body);
    const pairId = `p-${randomUUID()}`;
    const output = this.outputOf(pairId);
    await this.#deps.store.ensureDir(PAIRS_DIR);
    const { run, claimed, settled } = this.#launch(pairId, output, body);
    // Wait until the pair is claimed (runPair signals the published receipt.json) or refused before it was.
    await Promise.race([claimed.promise, run.done]);
    const outcome = settled();
    if (
      !claimed.done() &&
      outcome !== null &&
      !outcome.ok &&
      !(await somethingAt(this.#deps.pairDeps.fs, join(output, RECEIPT_FILE)))
    )
      throw toApiError(outcome.error);
    this.#pairs.set(pairId, run);
    return { pair_id: pairId };
  }

  /** 400 before anything runs: an invalid spec, a variable the server does not allow, a protected host path. */
  async #checkSpec(body: unknown): Promise<void> {
    const parsed = parsePairSpec(body);
    if (!parsed.ok) throw ApiError.invalid('the pair spec', parsed.issues);
    const spec = parsed.spec;
    const notAllowed = unallowedReferences(spec.environment, this.#deps.allowedEnv, 'environment');
    if (notAllowed.length > 0)
      throw new ApiError(
        400,
        'E_ENV_NOT_ALLOWED',
        'the pair spec references variables this server does not allow',
        notAllowed,
      );
    const hostPaths = [
      { field: 'cwd', hostPath: spec.cwd },
      { field: 'outcome_path', hostPath: dirname(spec.outcome_path) },
    ];
    const resolvedPaths = await Promise.all(
      hostPaths.map(async (p) => ({
        ...p,
        hostPath: await this.#deps.pairDeps.fs.realpath(p.hostPath).catch(() => p.hostPath),
      })),
    );
    const issues = checkMounts(resolvedPaths, this.#deps.protectedPaths);
    if (issues.length > 0)
      throw ApiError.invalid(
        'the pair spec',
        issues.map((i) => ({ path: i.field, rule: i.message })),
      );
  }

  /** runPair started in the background; `claimed` resolves once its receipt is published, `settled` once it ended. */
  #launch(
    pairId: string,
    output: string,
    body: unknown,
  ): {
    run: PairRun;
    claimed: { promise: Promise<void>; done: () => boolean };
    settled: () => { ok: true } | { ok: false; error: unknown } | null;
  } {
    const terminate = new AbortController();
    let claimed = false;
    const claimedSignal = Promise.withResolvers<void>();
    const running = runPair(this.#deps.pairDeps, {
      specText: JSON.stringify(body),
      specSource: `POST /v1/pairs (${pairId})`,
      output,
      bindAddress: this.#deps.bindAddress,
      environment: this.#deps.environment,
      codeVersion: this.#deps.codeVersion,
      cwd: output,
      hostPaths: this.#deps.protectedPaths,
      ...(this.#deps.protectedPaths.registryPath !== undefined
        ? { registryPath: this.#deps.protectedPaths.registryPath }
        : {}),
      ...(this.#deps.protectedPaths.mountRoots !== undefined
        ? { mountRoots: this.#deps.protectedPaths.mountRoots }
        : {}),
      terminate: terminate.signal,
      onClaimed: () => {
        claimed = true;
        claimedSignal.resolve();
      },
    });
    let settled: { ok: true } | { ok: false; error: unknown } | null = null;
    const run: PairRun = {
      pairId,
      output,
      terminate,
      state: 'running',
      error: null,
      done: running.then(
        () => {
          settled = { ok: true };
          run.state = 'finished';
        },
        (error: unknown) => {
          settled = { ok: false, error };
          run.state = 'failed';
          run.error = toApiError(error).message;
        },
      ),
    };
    return {
      run,
      claimed: { promise: claimedSignal.promise, done: () => claimed },
      settled: () => settled,
    };
  }

  async status(pairId: string): Promise<PairStatus> {
    const output = this.outputOf(pairId);
    const run = this.#pairs.get(pairId);
    const store = this.#deps.store;
    const receipt = await store.readJson(join(PAIRS_DIR, pairId, RECEIPT_FILE)).catch(() => null);
    if (run === undefined && receipt === null) throw ApiError.notFound(`pair ${pairId}`);
    const result = await store.readJson(join(PAIRS_DIR, pairId, RESULT_FILE)).catch(() => null);
    void output;
    const state = run?.state ?? (result !== null ? 'finished' : 'failed');
    return {
      pair_id: pairId,
      state,
      receipt,
      result,
      error:
        run?.error ??
        (result === null && run === undefined ? 'the server stopped before this pair finished' : null),
    };
  }

  /** How many of this server's pairs are running now (`roboguide_serve_pairs_running`). */
  runningCount(): number {
    let n = 0;
    for (const run of this.#pairs.values()) if (run.state === 'running') n++;
    return n;
  }

  /** Whether the pair is still running (log follow stops when it is not). */
  isRunning(pairId: string): boolean {
    return this.#pairs.get(pairId)?.state === 'running';
  }

  /** Controlled stop (SIGTERM, stop budget, kill), then the usual collection and verified removal. */
  async stop(pairId: string): Promise<PairStatus> {
    const run = this.#pairs.get(pairId);
    if (run === undefined) return this.status(pairId);
    run.terminate.abort();
    await run.done;
    return this.status(pairId);
  }

  async stopAll(): Promise<void> {
    await Promise.all([...this.#pairs.keys()].map((id) => this.stop(id)));
  }
}
