import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { BatchSnapshot, HostSnapshot } from '../../core/metrics/host-snapshot.js';
import { PAIR_PHASES } from '../../core/pair-phases.js';
import { PAUSE_REASONS } from '../../core/pause-rules.js';
import { BatchSeries } from './batch-series.js';
import { RegistryCallMetrics } from './instrumented-registry.js';

const BATCH_STATES = ['running', 'stopping', 'stopped', 'paused', 'drained'] as const;
/** Seconds: pairs last from seconds (a failed start) to hours (a benchmark run). */
const PAIR_BUCKETS = [1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14_400, 43_200];
const PHASE_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 14_400];
const MIB = 1024 * 1024;

/**
 * The exporter's Prometheus series (docs/metrics.md): gauges set from each scrape's snapshot, counters and
 * histograms fed by the pairs that finished since the previous one. Rendered by prom-client.
 */
export class ExporterMetrics {
  readonly register = new Registry();
  readonly registryCalls = new RegistryCallMetrics(this.register);
  readonly #series = new BatchSeries();
  readonly #g = gauges(this.register);
  readonly #finished = new Counter({
    name: 'roboguide_pairs_finished_total',
    help: "Pairs with a result, by classification (e1-batch status's counts).",
    labelNames: ['batch', 'classification'],
    registers: [this.register],
  });
  readonly #reasons = new Counter({
    name: 'roboguide_pair_reasons_total',
    help: 'Reasons recorded in finished pairs (one pair may have several; a closed set of words).',
    labelNames: ['batch', 'reason'],
    registers: [this.register],
  });
  readonly #duration = new Histogram({
    name: 'roboguide_pair_duration_seconds',
    help: 'Finished pairs, claim to result, by classification.',
    labelNames: ['batch', 'classification'],
    buckets: PAIR_BUCKETS,
    registers: [this.register],
  });
  readonly #phase = new Histogram({
    name: 'roboguide_pair_phase_duration_seconds',
    help: 'Time finished pairs spent in each lifecycle phase (create, run, drain, collect, remove).',
    labelNames: ['batch', 'phase'],
    buckets: PHASE_BUCKETS,
    registers: [this.register],
  });
  readonly #logBytes = new Counter({
    name: 'roboguide_pair_log_bytes_total',
    help: 'Bytes of the log files of finished pairs (after redaction), by stream.',
    labelNames: ['batch', 'stream'],
    registers: [this.register],
  });
  readonly #redactions = new Counter({
    name: 'roboguide_pair_outcome_redactions_total',
    help: "Values of finished pairs' outcomes that held a secret and were masked (result.json outcome_redactions).",
    labelNames: ['batch'],
    registers: [this.register],
  });

  constructor(options: { readonly processMetrics?: boolean } = {}) {
    if (options.processMetrics !== false) collectDefaultMetrics({ register: this.register });
  }

  apply(snapshot: HostSnapshot, scrapeSec: number): void {
    for (const gauge of Object.values(this.#g)) gauge.reset();
    const exported = new Set(snapshot.batches.map((b) => b.batchId));
    for (const batch of this.#series.batches()) if (!exported.has(batch)) this.#series.drop(batch);
    for (const b of snapshot.batches) this.#applyBatch(b);
    const g = this.#g;
    g.registryUp.set(snapshot.registry === null ? 0 : 1);
    for (const n of snapshot.registry?.nodes ?? []) {
      g.slotsHeld.set({ node: n.node }, n.slotsHeld);
      g.slotsLimit.set({ node: n.node }, n.slotsLimit);
      g.slotsFree.set({ node: n.node }, Math.max(0, n.slotsLimit - n.slotsHeld));
      g.gpuAdmitted.set({ node: n.node }, n.gpuMibHeld * MIB);
      if (n.gpuMibBudget !== null) g.gpuBudget.set({ node: n.node }, n.gpuMibBudget * MIB);
    }
    g.discovered.set(snapshot.discovered);
    g.exported.set(snapshot.batches.length);
    g.unreadable.set(snapshot.unreadable);
    g.scrape.set(scrapeSec);
  }

  #applyBatch(b: BatchSnapshot): void {
    const batch = b.batchId;
    const g = this.#g;
    if (b.reset) this.#series.drop(batch);
    for (const state of BATCH_STATES) g.state.set({ batch, state }, b.state === state ? 1 : 0);
    for (const reason of PAUSE_REASONS)
      g.paused.set({ batch, reason }, b.pauseReasons.includes(reason) ? 1 : 0);
    for (const c of b.pauseCauses) g.pauseCause.set({ batch, reason: c.reason, code: c.code }, 1);
    for (const state of ['total', 'pending', 'claimed', 'running'] as const)
      g.pairs.set({ batch, state }, b.counts[state]);
    g.queue.set({ batch }, b.counts.pending);
    g.workers.set({ batch }, b.workersAllowed);
    if (b.etaSec !== null) g.eta.set({ batch }, b.etaSec);
    g.up.set({ batch }, b.supervisor.up ? 1 : 0);
    if (b.supervisor.heartbeatAgeSec !== null) g.heartbeat.set({ batch }, b.supervisor.heartbeatAgeSec);
    g.unverified.set({ batch }, b.containersUnverified);
    for (const f of b.recentFailures)
      g.recent.set({ batch, job_id: f.jobId, classification: f.classification, reason: f.reason }, 1);
    for (const classification of [
      'completed',
      'infrastructure_failure',
      'fatal',
      'provider_stop',
      'harness_failure',
    ] as const) {
      const labels = this.#series.note(batch, this.#finished, { batch, classification });
      this.#finished.remove(labels);
      this.#finished.inc(labels, b.counts[classification]);
    }
    for (const pair of b.finished) {
      for (const reason of pair.reasons)
        this.#reasons.inc(this.#series.note(batch, this.#reasons, { batch, reason }));
      if (pair.durationSec !== null)
        this.#duration.observe(
          this.#series.note(batch, this.#duration, { batch, classification: pair.classification }),
          pair.durationSec,
        );
      if (pair.phasesSec !== null)
        for (const phase of PAIR_PHASES)
          this.#phase.observe(this.#series.note(batch, this.#phase, { batch, phase }), pair.phasesSec[phase]);
      if (pair.logBytes !== null)
        for (const stream of ['stdout', 'stderr'] as const)
          this.#logBytes.inc(
            this.#series.note(batch, this.#logBytes, { batch, stream }),
            pair.logBytes[stream],
          );
      this.#redactions.inc(this.#series.note(batch, this.#redactions, { batch }), pair.outcomeRedactions);
    }
  }
}

type GaugeOf = <L extends string>(name: string, help: string, labelNames: readonly L[]) => Gauge<L>;

/** Every gauge, set from each scrape's snapshot (registered in this order: the order /metrics lists them). */
function gauges(register: Registry) {
  const gauge: GaugeOf = (name, help, labelNames) =>
    new Gauge({ name, help, labelNames, registers: [register] });
  return { ...batchGauges(gauge), ...nodeGauges(gauge), ...exporterGauges(gauge) };
}

/** Per batch: its state and pauses, its pairs, its supervisor, its unverified containers and newest failures. */
function batchGauges(gauge: GaugeOf) {
  return {
    state: gauge(
      'roboguide_batch_state',
      "The batch is in this state (1) or not (0): e1-batch status's state.",
      ['batch', 'state'],
    ),
    paused: gauge('roboguide_batch_paused', 'A pause reason in force (1) or not (0).', ['batch', 'reason']),
    pauseCause: gauge(
      'roboguide_batch_pause_cause',
      'The error code that caused a pause in force (always 1).',
      ['batch', 'reason', 'code'],
    ),
    pairs: gauge(
      'roboguide_batch_pairs',
      'Pairs of the batch: total, pending (unclaimed), claimed (without result), running.',
      ['batch', 'state'],
    ),
    queue: gauge('roboguide_batch_queue_depth', 'Pairs not claimed yet.', ['batch']),
    workers: gauge('roboguide_batch_workers_allowed', 'Pairs the dispatch rule allows at once.', ['batch']),
    eta: gauge(
      'roboguide_batch_eta_seconds',
      "Time left by e1-batch status's estimate (absent when it gives none).",
      ['batch'],
    ),
    up: gauge(
      'roboguide_supervisor_up',
      'The recorded supervisor is the same live process and has not exited (1), else 0.',
      ['batch'],
    ),
    heartbeat: gauge(
      'roboguide_supervisor_heartbeat_age_seconds',
      "Seconds since the batch's status.json, journal or supervisor.json last changed.",
      ['batch'],
    ),
    unverified: gauge(
      'roboguide_containers_unverified',
      'Pairs whose container was not proven removed (must be 0).',
      ['batch'],
    ),
    recent: gauge(
      'roboguide_batch_recent_failure',
      'The 10 newest failed pairs (always 1): the only series with a job id.',
      ['batch', 'job_id', 'classification', 'reason'],
    ),
  };
}

/** Per node, from the capacity registry: slots and GPU memory; and whether the registry answered. */
function nodeGauges(gauge: GaugeOf) {
  return {
    slotsHeld: gauge('roboguide_slots_held', 'Registry reservations held on the node.', ['node']),
    slotsLimit: gauge('roboguide_slots_limit', "The node's max_reservations (its own or the default).", [
      'node',
    ]),
    slotsFree: gauge('roboguide_slots_free', 'Reservations the node can still admit.', ['node']),
    gpuAdmitted: gauge(
      'roboguide_gpu_memory_admitted_bytes',
      'GPU memory reserved by held reservations on the node.',
      ['node'],
    ),
    gpuBudget: gauge('roboguide_gpu_memory_budget_bytes', "The node's GPU budget (absent: no GPU limit).", [
      'node',
    ]),
    registryUp: gauge(
      'roboguide_registry_up',
      'The capacity registry answered this scrape (1) or not (0).',
      [],
    ),
  };
}

/** The exporter's own scan: batches found, exported, unreadable, and how long it took. */
function exporterGauges(gauge: GaugeOf) {
  return {
    discovered: gauge(
      'roboguide_exporter_batches_discovered',
      'Batch folders found under the --batches roots.',
      [],
    ),
    exported: gauge(
      'roboguide_exporter_batches_exported',
      'Batches exported (not ended, or ended within --keep-ended).',
      [],
    ),
    unreadable: gauge(
      'roboguide_exporter_batches_unreadable',
      'Batch folders that could not be read this scrape.',
      [],
    ),
    scrape: gauge('roboguide_exporter_scan_duration_seconds', 'How long the last scan of the host took.', []),
  };
}
