// The metrics exporter's scrape cost (issue 45): a host with 10 live batches and 10,000 finished pairs, scraped every
// 5 s. Synthetic batch folders as a live supervisor leaves them (status.json with its basis, supervisor.json naming
// this live process, the journal, every pair's receipt and result.json with phases), a SQLite registry with 10 held
// reservations. In the same run:
// 1. the first scrape (every journal and result.json read once), then the steady scrape with one pair finishing
//    between two scrapes (medians; the clock moves 5 s per scrape, so each status is derived again every 30 s);
// 2. against a baseline side by side: a stateless exporter that derives every batch's status in full at each scrape
//    (every receipt and result, the whole journal: readStatusFull) — the ratio is what the incremental read saves;
// 3. memory: heap after a forced GC at scrapes 200, 2,000 and 4,000 (≈ 5.6 h of 5 s scrapes), no activity;
// 4. the same scrape over HTTP through the real `metrics` listener (startExporter), wall time per GET.
// Run after the build: npm run build && node --expose-gc bench/metrics.bench.js [batches] [finishedPerBatch]
import { mkdir, mkdtemp, rm, writeFile, appendFile } from 'node:fs/promises';
import { tmpdir, loadavg } from 'node:os';
import { join } from 'node:path';
import { EvidenceStore } from '../dist/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../dist/adapters/fs/node-file-system.js';
import { currentProcessIdentity, procHostIdentity } from '../dist/adapters/host-identity.js';
import { loadBatch, readJobFiles } from '../dist/app/batch/batch-context.js';
import { readStatus, readStatusFull } from '../dist/app/batch/read-status.js';
import { buildWrittenStatus, ledgerFromFiles } from '../dist/app/batch/status.js';
import { capacityConfigOf } from '../dist/app/batch/capacity-config.js';
import { HostScan } from '../dist/app/metrics/host-scan.js';
import { ExporterMetrics } from '../dist/adapters/metrics/exporter-metrics.js';
import { instrumentRegistry } from '../dist/adapters/metrics/instrumented-registry.js';
import { SqliteCapacityRegistry } from '../dist/adapters/registry/sqlite-capacity-registry.js';
import { silentLogger } from '../dist/app/ports/logger.js';
import { startExporter } from '../dist/metrics-root.js';
import { elapsedMsSince, median } from './support.js';

const BATCHES = Number(process.argv[2] ?? 10);
const FINISHED = Number(process.argv[3] ?? 1000);
const PENDING = 60;
const T0 = Date.parse('2026-12-01T00:00:00.000Z');
const at = (sec) => new Date(T0 + sec * 1000).toISOString();
const KINDS = [
  'completed',
  'completed',
  'completed',
  'infrastructure_failure',
  'completed',
  'harness_failure',
];
const idOf = (i) => `pair-${String(i + 1).padStart(5, '0')}`;

function resultOf(batchId, id, kind, start) {
  return {
    schema: 'roboguide.e1.result/v1',
    job_id: id,
    batch_id: batchId,
    claim_id: `claim-${id}`,
    classification: kind,
    reasons: kind === 'completed' ? [] : kind === 'harness_failure' ? ['lost_worker'] : ['timeout'],
    outcome: {
      job_id: id,
      infrastructure_failure: false,
      fatal_failure: false,
      arms: [{ verdict: 'rejected' }],
    },
    outcome_redactions: 0,
    outcome_sha256: null,
    container: { id: `c-${id}`, exit_code: 0, timed_out: false, oom_killed: false },
    logs: { stdout: { bytes: 100_000, closed: true }, stderr: { bytes: 1000, closed: true } },
    sessions: { files: 0, bytes: 0, refusals: [] },
    provider_failure: null,
    provider_failure_error_kind: null,
    cleanup: { removed: true, verified_absent: true, attempts: 1 },
    engine_error: null,
    phases: { create_ms: 250, run_ms: 48_000, drain_ms: 20, collect_ms: 400, remove_ms: 600 },
    started_at: at(start),
    finished_at: at(start + 50),
  };
}

function receiptOf(batchId, id, start) {
  return {
    schema: 'roboguide.e1.receipt/v1',
    batch_id: batchId,
    job_id: id,
    attempt: 1,
    claim_id: `claim-${id}`,
    claimed_at: at(start),
    host_boot_id: null,
    supervisor: { pid: 1, start_ticks: null, boot_id: null },
    reservation_id: 'r',
    image: 'roboguide/pair-driver:1',
    outcome_path: `/tmp/out/${id}.json`,
    source_sha256: {},
    code_version: 'bench',
    container_id: `c-${id}`,
    container_name: `roboguide-${id}`,
  };
}

const claimed = (id, start) => ({
  type: 'claimed',
  at: at(start),
  job_id: id,
  claim_id: `claim-${id}`,
  reservation_id: 'r',
  claimed_at: at(start),
  deadline: at(start + 3600),
});
const finishedRecord = (id, kind, start) => ({
  type: 'pair_finished',
  at: at(start + 50),
  job_id: id,
  claim_id: `claim-${id}`,
  classification: kind,
  reasons: [],
  started_at: at(start),
  finished_at: at(start + 50),
  gpu_peak_mib: null,
});

/** A batch folder as a live supervisor leaves it: FINISHED pairs done, one running, PENDING to go. */
async function writeBatch(out, batchId, live) {
  const jobs = FINISHED + 1 + PENDING;
  await mkdir(join(out, 'jobs'), { recursive: true });
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    image: 'roboguide/pair-driver:1',
    jobs: Array.from({ length: jobs }, (_, i) => ({
      job_id: idOf(i),
      argv: ['/opt/driver/run'],
      cwd: '/tmp',
      outcome_path: `/tmp/out/${idOf(i)}.json`,
      timeout_seconds: 3600,
    })),
    capacity: { max_workers: 1 },
  };
  await writeFile(join(out, 'manifest.json'), JSON.stringify(manifest));
  await writeFile(
    join(out, 'batch.json'),
    JSON.stringify({
      schema: 'roboguide.e1.batch_identity/v1',
      batch_id: batchId,
      created_at: at(0),
      gpu_observation: null,
    }),
  );
  const lines = [
    { type: 'batch_created', at: at(0), batch_id: batchId, jobs },
    {
      type: 'supervisor_started',
      at: at(1),
      mode: 'start',
      pid: live.pid,
      start_ticks: live.start_ticks,
      boot_id: live.boot_id,
    },
  ];
  const files = [];
  for (let i = 0; i <= FINISHED; i++) {
    const id = idOf(i);
    const start = 10 + i * 60;
    lines.push(claimed(id, start));
    let result = null;
    if (i < FINISHED) {
      const kind = KINDS[i % KINDS.length];
      result = resultOf(batchId, id, kind, start);
      lines.push(finishedRecord(id, kind, start));
    }
    files.push({ id, receipt: receiptOf(batchId, id, start), result });
  }
  for (let i = 0; i < files.length; i += 200)
    await Promise.all(
      files.slice(i, i + 200).map(async ({ id, receipt, result }) => {
        await mkdir(join(out, 'jobs', id));
        await writeFile(join(out, 'jobs', id, 'receipt.json'), JSON.stringify(receipt, null, 2));
        if (result) await writeFile(join(out, 'jobs', id, 'result.json'), JSON.stringify(result, null, 2));
      }),
    );
  await writeFile(
    join(out, 'events.jsonl'),
    lines.map((e, i) => JSON.stringify({ seq: i + 1, ...e })).join('\n') + '\n',
  );
  const store = new EvidenceStore(new NodeFileSystem(), out);
  await store.writeJsonAtomic('supervisor.json', live);
  const { batch, manifest: m } = await loadBatch(store);
  const slice = await store.readJournalSlice();
  const ledger = ledgerFromFiles(m, await readJobFiles(store, m), slice.records);
  ledger.at(slice.records.at(-1)?.seq ?? 0, slice.endBytes);
  const written = await buildWrittenStatus({
    ledger,
    output: out,
    batch,
    capacity: capacityConfigOf(m, batch),
    supervisor: live,
    running: [],
    now: new Date(T0 + 3_600_000),
  });
  await store.writeJsonAtomic('status.json', written);
  return { store, next: FINISHED + 1, seq: lines.length };
}

/** One more pair finished, as the supervisor appends it (claim, result.json, pair_finished). */
async function finishOne(b, batchId) {
  const id = idOf(b.next);
  const start = 10 + b.next * 60;
  await mkdir(join(b.store.root, 'jobs', id));
  await writeFile(
    join(b.store.root, 'jobs', id, 'receipt.json'),
    JSON.stringify(receiptOf(batchId, id, start)),
  );
  await writeFile(
    join(b.store.root, 'jobs', id, 'result.json'),
    JSON.stringify(resultOf(batchId, id, 'completed', start)),
  );
  const recs = [claimed(id, start), finishedRecord(id, 'completed', start)].map((r) =>
    JSON.stringify({ seq: ++b.seq, ...r }),
  );
  await appendFile(join(b.store.root, 'events.jsonl'), recs.join('\n') + '\n');
  b.next += 1;
}

async function main() {
  const root = await mkdtemp(join(tmpdir(), 'rg-bench-metrics-'));
  try {
    const me = await currentProcessIdentity();
    const live = { ...me, started_at: at(1), mode: 'start' };
    const ids = Array.from({ length: BATCHES }, (_, i) => `e1-20261201-${String(i).padStart(8, '0')}`);
    const started = process.hrtime.bigint();
    const batches = [];
    for (const [i, id] of ids.entries())
      batches.push(await writeBatch(join(root, 'batches', `b${i}`), id, live));
    const registryRaw = SqliteCapacityRegistry.open({ path: join(root, 'registry.db') });
    await registryRaw.setLimits({ maxReservations: 20, gpuMib: 81_920 });
    for (const id of ids)
      await registryRaw.admit({ batchId: id, jobId: 'x', claimId: `claim-${id}`, gpuMib: 20_000 });
    console.log(
      `metrics exporter: ${BATCHES} live batches × ${FINISHED} finished pairs (+1 running, ${PENDING} pending), written in ${(elapsedMsSince(started) / 1000).toFixed(1)} s; load ${loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')}`,
    );

    const fs = new NodeFileSystem();
    const makeScrape = () => {
      const metrics = new ExporterMetrics();
      const registry = instrumentRegistry(registryRaw, metrics.registryCalls);
      const scan = new HostScan(
        {
          fs,
          host: procHostIdentity,
          storeAt: (dir) => new EvidenceStore(fs, dir),
          readStatus: (store, now) => readStatus(store, undefined, now, procHostIdentity),
          registry,
          logger: silentLogger,
        },
        { roots: [join(root, 'batches')] },
      );
      return async (now) => {
        const snapshot = await scan.scan(now);
        metrics.apply(snapshot, 0);
        return metrics.register.metrics();
      };
    };

    // 1. First scrape, then the steady scrape with one pair finishing between two scrapes (clock + 5 s each).
    const scrape = makeScrape();
    let now = T0 + 4_000_000;
    let t = process.hrtime.bigint();
    const firstText = await scrape(new Date(now));
    const firstMs = elapsedMsSince(t);
    if (!firstText.includes(`roboguide_pairs_finished_total{batch="${ids[0]}",classification="completed"}`))
      throw new Error('the first scrape does not show the batches');
    const steady = [];
    const STEADY = 50;
    for (let i = 0; i < STEADY; i++) {
      await finishOne(batches[i % BATCHES], ids[i % BATCHES]);
      now += 5000;
      t = process.hrtime.bigint();
      await scrape(new Date(now));
      steady.push(elapsedMsSince(t));
    }
    const idle = [];
    for (let i = 0; i < STEADY; i++) {
      now += 5000;
      t = process.hrtime.bigint();
      await scrape(new Date(now));
      idle.push(elapsedMsSince(t));
    }

    // 2. Baseline side by side: every batch's status derived in full at each scrape.
    const full = [];
    for (let i = 0; i < 5; i++) {
      t = process.hrtime.bigint();
      for (const b of batches) await readStatusFull(b.store, undefined, new Date(now), procHostIdentity);
      full.push(elapsedMsSince(t));
    }

    // 3. Memory: 4,000 scrapes without activity (the clock 5 s further each), heap after a forced GC.
    const gc = globalThis.gc;
    const heapAt = {};
    for (let i = 1; i <= 4000; i++) {
      now += 5000;
      await scrape(new Date(now));
      if ((i === 200 || i === 2000 || i === 4000) && gc) {
        gc();
        gc();
        heapAt[i] = process.memoryUsage().heapUsed / 1024 / 1024;
      }
    }

    // 4. Over HTTP through the real listener (wall time per GET).
    const exporter = await startExporter({
      host: '127.0.0.1',
      port: 0,
      token: null,
      roots: [join(root, 'batches')],
      registryFlag: join(root, 'registry.db'),
      logger: silentLogger,
    });
    const http = [];
    try {
      await fetch(`http://127.0.0.1:${exporter.port}/metrics`).then((r) => r.text());
      for (let i = 0; i < 20; i++) {
        t = process.hrtime.bigint();
        const body = await fetch(`http://127.0.0.1:${exporter.port}/metrics`).then((r) => r.text());
        http.push(elapsedMsSince(t));
        if (!body.includes('roboguide_slots_held')) throw new Error('no registry series over HTTP');
      }
    } finally {
      await exporter.close();
    }
    registryRaw.closeSync();

    const fmt = (v) => v.toFixed(1);
    console.log(`first scrape (every journal and result.json read once): ${fmt(firstMs)} ms`);
    console.log(
      `steady scrape, one pair finished since the last (median of ${STEADY}): ${fmt(median(steady))} ms (max ${fmt(Math.max(...steady))})`,
    );
    console.log(
      `steady scrape, nothing changed (median of ${STEADY}): ${fmt(median(idle))} ms (max ${fmt(Math.max(...idle))})`,
    );
    console.log(`baseline: every status derived in full per scrape (median of 5): ${fmt(median(full))} ms`);
    console.log(`ratio baseline / steady scrape: ${(median(full) / median(steady)).toFixed(0)}×`);
    console.log(`GET /metrics over HTTP, nothing changed (median of 20): ${fmt(median(http))} ms`);
    if (gc)
      console.log(
        `heap after GC: scrape 200 ${fmt(heapAt[200])} MB, 2000 ${fmt(heapAt[2000])} MB, 4000 ${fmt(heapAt[4000])} MB`,
      );
    else console.log('heap: run with node --expose-gc for the memory figures');
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

await main();
