// Incremental batch state (issue 14, item 2). On a synthetic batch of 10,000 jobs on disk (9,991 finished, one
// claimed and running, 8 pending), in the same run:
// 1. `e1-batch status --json` as its own process (wall time and the process's own peak RSS, medians):
//    hot — the batch's supervisor alive (simulated faithfully: supervisor.json names this live process, status.json
//    is what the supervisor writes, with its basis, and the journal has grown past it); cold — the supervisor dead
//    (the journal folded once). References: the same process doing the full derivation the command did before
//    (every receipt and result, the whole journal), and `--version` (what any command costs to start).
// 2. The supervisor's bookkeeping per pair — its journal records folded into the ledger plus its two status.json
//    writes (claim, finish) — at 10,000 jobs against 10 jobs: the ratio should be ~1. For scale, the same for the
//    rescan the supervisor did before (every job's files, the whole journal, per status write).
// 3. Issue 26: the hot status process against its aim (<= 0.3 s, <= 60 MB); with BASELINE_ROOT=<another built
//    checkout> that checkout's `bin/run.js e1-batch status` runs alongside (before/after of a change, same run).
// Run after the build: npm run build && npx node bench/status.bench.js [jobs] [runs]
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir, loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { EvidenceStore } from '../dist/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../dist/adapters/fs/node-file-system.js';
import { currentProcessIdentity, procHostIdentity } from '../dist/adapters/host-identity.js';
import { loadBatch, readJobFiles } from '../dist/app/batch/batch-context.js';
import { readColdStatus, readHotStatus, readStatusFull } from '../dist/app/batch/read-status.js';
import { buildStatus, buildWrittenStatus, ledgerFromFiles } from '../dist/app/batch/status.js';
import { capacityConfigOf } from '../dist/app/batch/capacity-config.js';
import { elapsedMsSince, median } from './support.js';

const JOBS = Number(process.argv[2] ?? 10_000);
const RUNS = Number(process.argv[3] ?? 5);
const SMALL = 10;
const PENDING = 8;
const T0 = Date.parse('2026-12-01T00:00:00.000Z');
const at = (sec) => new Date(T0 + sec * 1000).toISOString();
const KINDS = [
  'completed',
  'completed',
  'completed',
  'completed',
  'completed',
  'completed',
  'infrastructure_failure',
  'provider_stop',
  'harness_failure',
  'completed',
];
const BIN = resolve('bin/run.js');

/** A batch folder as the supervisor leaves it: `finished` pairs done, then one claimed and running, the rest pending. */
async function writeBatch(out, jobs, finished) {
  const ids = Array.from({ length: jobs }, (_, i) => `pair-${String(i + 1).padStart(5, '0')}`);
  await mkdir(join(out, 'jobs'), { recursive: true });
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    image: 'roboguide/pair-driver:1',
    jobs: ids.map((id) => ({
      job_id: id,
      argv: ['/opt/driver/run'],
      cwd: '/tmp',
      outcome_path: `/tmp/out/${id}.json`,
      timeout_seconds: 3600,
    })),
    capacity: { max_workers: 2, gpu_total_mib: 81920, gpu_baseline_mib: 1024, gpu_fraction: 0.9 },
  };
  await writeFile(join(out, 'manifest.json'), JSON.stringify(manifest));
  await writeFile(
    join(out, 'batch.json'),
    JSON.stringify({
      schema: 'roboguide.e1.batch_identity/v1',
      batch_id: 'bench',
      created_at: at(0),
      gpu_observation: null,
    }),
  );
  const lines = [
    { type: 'batch_created', at: at(0), batch_id: 'bench', jobs },
    { type: 'supervisor_started', at: at(1), mode: 'start', pid: 1 },
  ];
  const receiptOf = (id, start) => ({
    schema: 'roboguide.e1.receipt/v1',
    batch_id: 'bench',
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
  });
  const files = [];
  for (let i = 0; i <= finished && i < jobs; i++) {
    const id = ids[i];
    const start = 10 + i * 60;
    const receipt = receiptOf(id, start);
    lines.push({
      type: 'claimed',
      at: at(start),
      job_id: id,
      claim_id: receipt.claim_id,
      reservation_id: 'r',
      claimed_at: receipt.claimed_at,
      deadline: at(start + 3600),
    });
    lines.push({ type: 'container_created', at: at(start), job_id: id, container_id: receipt.container_id });
    let result = null;
    if (i < finished) {
      const kind = KINDS[i % KINDS.length];
      const peak = kind === 'completed' ? 20_000 + (i % 7) * 1000 : null;
      result = {
        schema: 'roboguide.e1.result/v1',
        job_id: id,
        batch_id: 'bench',
        claim_id: receipt.claim_id,
        classification: kind,
        reasons: [],
        outcome: {
          job_id: id,
          infrastructure_failure: kind === 'infrastructure_failure',
          fatal_failure: false,
          arms: [{ verdict: 'rejected' }],
          ...(peak ? { resource_usage: { both_arms_measured: true, peak_job_gpu_mib: peak } } : {}),
        },
        outcome_sha256: null,
        container: { id: receipt.container_id, exit_code: 0, timed_out: false, oom_killed: false },
        logs: { stdout: { bytes: 1000, closed: true }, stderr: { bytes: 10, closed: true } },
        sessions: { files: 0, bytes: 0, refusals: [] },
        provider_failure: null,
        provider_failure_error_kind: null,
        cleanup: { removed: true, verified_absent: true, attempts: 1 },
        engine_error: null,
        started_at: at(start),
        finished_at: at(start + 50),
      };
      lines.push({
        type: 'pair_finished',
        at: at(start + 50),
        job_id: id,
        claim_id: receipt.claim_id,
        classification: kind,
        reasons: [],
        started_at: at(start),
        finished_at: at(start + 50),
        gpu_peak_mib: peak,
      });
      lines.push({ type: 'reconciled', at: at(start + 50), job_id: id, kind: 'committed', reason: null });
    }
    files.push({ id, receipt, result });
  }
  for (let i = 0; i < files.length; i += 200) {
    await Promise.all(
      files.slice(i, i + 200).map(async ({ id, receipt, result }) => {
        const dir = join(out, 'jobs', id);
        await mkdir(dir);
        await writeFile(join(dir, 'receipt.json'), JSON.stringify(receipt, null, 2));
        if (result) await writeFile(join(dir, 'result.json'), JSON.stringify(result, null, 2));
        await writeFile(join(dir, 'stdout.log'), 'x\n');
        await writeFile(join(dir, 'stderr.log'), '');
      }),
    );
  }
  await writeFile(
    join(out, 'events.jsonl'),
    lines.map((e, i) => JSON.stringify({ seq: i + 1, ...e })).join('\n') + '\n',
  );
}

/** One process: wall ms from spawn to exit, and its own peak RSS (MB) as it reports it on exit. */
function timedProcess(args, rssFile) {
  const started = process.hrtime.bigint();
  const child = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', ...args], {
    env: {
      ...process.env,
      NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import ${hook}`,
      BENCH_RSS_FILE: rssFile,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c) => (stdout += c));
  child.stderr.on('data', (c) => (stderr += c));
  return new Promise((ok, fail) => {
    child.on('close', async (code) => {
      const ms = elapsedMsSince(started);
      if (code !== 0) return fail(new Error(`${args.join(' ')} exited ${code}: ${stderr.slice(-500)}`));
      const kb = Number(await readFile(rssFile, 'utf8'));
      ok({ ms, rssMb: kb / 1024, stdout });
    });
  });
}

async function medianInProcess(fn) {
  await fn();
  const ms = [];
  for (let r = 0; r < RUNS; r++) {
    const started = process.hrtime.bigint();
    await fn();
    ms.push(elapsedMsSince(started));
  }
  return median(ms);
}

async function medianProcess(args, rssFile) {
  await timedProcess(args, rssFile); // warm-up (page cache, compile cache)
  const runs = [];
  for (let r = 0; r < RUNS; r++) runs.push(await timedProcess(args, rssFile));
  return {
    ms: median(runs.map((r) => r.ms)),
    rssMb: median(runs.map((r) => r.rssMb)),
    stdout: runs.at(-1).stdout,
  };
}

/**
 * The supervisor's bookkeeping for one pair, as it does it now: the claim and finish records folded into its ledger
 * as they are appended, status.json rewritten from the ledger on the claim and on the finish. Returns a step that
 * claims and finishes the next pending job (manifest order) and gives its ms.
 */
async function ledgerBookkeeping(out, supervisor) {
  const store = new EvidenceStore(new NodeFileSystem(), out);
  const { batch, manifest } = await loadBatch(store);
  const slice = await store.readJournalSlice();
  const ledger = ledgerFromFiles(manifest, await readJobFiles(store, manifest), slice.records);
  ledger.at(slice.records.at(-1)?.seq ?? 0, slice.endBytes);
  store.onJournalAppend((record, endBytes) => ledger.apply(record, endBytes));
  const capacity = capacityConfigOf(manifest, batch);
  const write = async () =>
    store.writeJsonAtomic(
      'status.json',
      await buildWrittenStatus({
        ledger,
        output: out,
        batch,
        capacity,
        supervisor,
        running: [],
        now: new Date(),
      }),
    );
  const pending = manifest.jobs.map((j) => j.job_id).filter((id) => !ledger.knows(id));
  let r = 0;
  return async () => {
    const jobId = pending[r];
    const started = process.hrtime.bigint();
    const claimedAt = new Date().toISOString();
    const claimId = `bench-${r++}`;
    await store.appendJournal({
      type: 'claimed',
      at: claimedAt,
      job_id: jobId,
      claim_id: claimId,
      reservation_id: 'r',
      claimed_at: claimedAt,
      deadline: claimedAt,
    });
    await write();
    await store.appendJournal({
      type: 'container_created',
      at: new Date().toISOString(),
      job_id: jobId,
      container_id: `c-${r}`,
    });
    await store.appendJournal({
      type: 'pair_finished',
      at: new Date().toISOString(),
      job_id: jobId,
      claim_id: claimId,
      classification: 'completed',
      reasons: [],
      started_at: claimedAt,
      finished_at: new Date().toISOString(),
      gpu_peak_mib: null,
    });
    await write();
    await store.appendJournal({
      type: 'reconciled',
      at: new Date().toISOString(),
      job_id: jobId,
      kind: 'committed',
      reason: null,
    });
    const ms = elapsedMsSince(started);
    if (r === pending.length && ledger.counts(0).pending !== 0)
      throw new Error('bookkeeping bench: the ledger did not follow the records');
    return ms;
  };
}

/** The same two status writes as the supervisor did them before: every job's files and the whole journal, each time. */
async function rescanBookkeeping(out) {
  const store = new EvidenceStore(new NodeFileSystem(), out);
  const { batch, manifest } = await loadBatch(store);
  const write = async () => {
    const files = await readJobFiles(store, manifest);
    await store.writeJsonAtomic(
      'status.json',
      await buildStatus({
        store,
        batch,
        manifest,
        files,
        journal: await store.readJournal(),
        running: [],
        now: new Date(),
        supervisorAlive: true,
      }),
    );
  };
  const ms = [];
  for (let r = 0; r < RUNS; r++) {
    const started = process.hrtime.bigint();
    await write();
    await write();
    ms.push(elapsedMsSince(started));
  }
  return median(ms);
}

const root = await mkdtemp(join(tmpdir(), 'rg-status-bench-'));
const hook = join(root, 'rss-hook.mjs');
try {
  await writeFile(
    hook,
    // VmHWM (the peak of this process's own address space), not getrusage's maxRSS: Linux carries maxRSS across
    // fork + exec, so a child spawned by this bench reported at least the bench's own peak (64 MB or more).
    "import { readFileSync, writeFileSync } from 'node:fs';\nprocess.on('exit', () => writeFileSync(process.env.BENCH_RSS_FILE, /VmHWM:\\s*(\\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))[1]));\n",
  );
  const big = join(root, 'big');
  const small = join(root, 'small');
  // Both: one pair claimed and running, PENDING jobs left (the bookkeeping bench claims and finishes those).
  await writeBatch(big, JOBS, JOBS - 1 - PENDING);
  await writeBatch(small, SMALL, SMALL - 1 - PENDING);
  // BENCH_EGRESS_KIB=N (issue 42 item 4): the running pair has an egress.jsonl of about N KiB, which status reads live.
  const egressKib = Number(process.env.BENCH_EGRESS_KIB ?? 0);
  if (egressKib > 0) {
    const line = `${JSON.stringify({ time: at(1), via: 'connect', host: 'evil.test', address: '198.18.1.10', port: 443, method: null, decision: 'refused', bytes_up: 0, bytes_down: 0, source: '172.30.0.2' })}\n`;
    const id = `pair-${String(JOBS - PENDING).padStart(5, '0')}`;
    await writeFile(
      join(big, 'jobs', id, 'egress.jsonl'),
      line.repeat(Math.ceil((egressKib * 1024) / line.length)),
    );
  }
  const rssFile = join(root, 'rss');
  const me = await currentProcessIdentity();
  const live = { ...me, started_at: at(1), mode: 'start' };
  const dead = { ...live, start_ticks: 'gone' };

  // status.json as the live supervisor wrote it a few records ago: the journal has grown past its basis since.
  const store = new EvidenceStore(new NodeFileSystem(), big);
  await store.writeJsonAtomic('supervisor.json', live);
  {
    const { batch, manifest } = await loadBatch(store);
    const slice = await store.readJournalSlice();
    const ledger = ledgerFromFiles(manifest, await readJobFiles(store, manifest), slice.records);
    ledger.at(slice.records.at(-1)?.seq ?? 0, slice.endBytes);
    await store.writeJsonAtomic(
      'status.json',
      await buildWrittenStatus({
        ledger,
        output: big,
        batch,
        capacity: capacityConfigOf(manifest, batch),
        supervisor: live,
        running: [],
        now: new Date(),
      }),
    );
    await store.appendJournal({
      type: 'admission_refused',
      at: new Date().toISOString(),
      job_id: 'pair-00002',
      reason: 'host_full',
    });
  }
  const statusArgs = [BIN, 'e1-batch', 'status', '--output', big, '--json'];
  const fullScript = join(root, 'full.mjs');
  await writeFile(
    fullScript,
    `import { EvidenceStore } from '${resolve('dist/app/evidence/evidence-store.js')}';\nimport { NodeFileSystem } from '${resolve('dist/adapters/fs/node-file-system.js')}';\nimport { readStatusFull } from '${resolve('dist/app/batch/read-status.js')}';\nimport { createContainerRuntime } from '${resolve('dist/composition-root.js')}';\nimport { procHostIdentity } from '${resolve('dist/adapters/host-identity.js')}';\nconst rt = createContainerRuntime();\nconst engine = await rt.info().then(() => rt, () => undefined);\nprocess.stdout.write(JSON.stringify(await readStatusFull(new EvidenceStore(new NodeFileSystem(), process.argv[2]), engine, new Date(), procHostIdentity)));\n`,
  );

  console.log(
    `status of a ${JOBS}-job batch (${JOBS - 1 - PENDING} finished, 1 running, ${PENDING} pending); runs ${RUNS} (medians); load ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  const version = await medianProcess([BIN, '--version'], rssFile);
  const hot = await medianProcess(statusArgs, rssFile);
  const baseArgs = process.env.BASELINE_ROOT
    ? [resolve(process.env.BASELINE_ROOT, 'bin/run.js'), ...statusArgs.slice(1)]
    : null;
  const hotBase = baseArgs ? await medianProcess(baseArgs, rssFile) : null;
  const fullLive = await medianProcess([fullScript, big], rssFile);
  const inHot = await medianInProcess(() =>
    readHotStatus(store, undefined, new Date(), procHostIdentity).then((s) => {
      if (s === null) throw new Error('hot status fell back to cold');
    }),
  );
  const inFullLive = await medianInProcess(() =>
    readStatusFull(store, undefined, new Date(), procHostIdentity),
  );
  await store.writeJsonAtomic('supervisor.json', dead);
  const cold = await medianProcess(statusArgs, rssFile);
  const coldBase = baseArgs ? await medianProcess(baseArgs, rssFile) : null;
  const fullDead = await medianProcess([fullScript, big], rssFile);
  const inCold = await medianInProcess(() => readColdStatus(store, undefined, new Date(), procHostIdentity));
  const inFullDead = await medianInProcess(() =>
    readStatusFull(store, undefined, new Date(), procHostIdentity),
  );
  const same = (a, b) => {
    // Two processes, two moments: updated_at and the ETA's remaining time (it counts the running pair's elapsed time) differ.
    const strip = (s) => {
      const v = JSON.parse(s);
      // The running pairs' egress is read live by `e1-batch status` only (the full derivation has none).
      const egress = v.egress?.pairs > 0 ? { ...v.egress, running: undefined } : undefined;
      return JSON.stringify({
        ...v,
        egress,
        updated_at: null,
        eta: v.eta && { ...v.eta, remaining_sec: null },
      });
    };
    if (strip(a) === strip(b)) return 'same output';
    const [x, y] = [JSON.parse(a), JSON.parse(b)];
    return `OUTPUT DIFFERS in ${Object.keys(x)
      .filter((k) => k !== 'updated_at' && JSON.stringify(x[k]) !== JSON.stringify(y[k]))
      .join(', ')}`;
  };
  const row = (name, r, ref) =>
    console.log(
      `  ${name.padEnd(44)} ${r.ms.toFixed(0).padStart(6)} ms ${r.rssMb.toFixed(0).padStart(5)} MB RSS${ref ? `   ratio ${(r.ms / ref.ms).toFixed(2)} time, ${(r.rssMb / ref.rssMb).toFixed(2)} RSS` : ''}`,
    );
  row('--version (start-up floor)', version);
  row('full derivation (before), supervisor alive', fullLive);
  row('status --json hot (supervisor alive)', hot, fullLive);
  row('full derivation (before), supervisor dead', fullDead);
  row('status --json cold (supervisor dead)', cold, fullDead);
  if (hotBase) row('status --json hot, BASELINE_ROOT build', hotBase, fullLive);
  if (coldBase) row('status --json cold, BASELINE_ROOT build', coldBase, fullDead);
  console.log(
    `  issue 26: status hot ${(hot.ms / 1000).toFixed(2)} s, ${hot.rssMb.toFixed(0)} MB (aim <= 0.3 s, <= 60 MB)${hotBase ? `; ratio to BASELINE_ROOT ${(hot.ms / hotBase.ms).toFixed(2)} time, ${(hot.rssMb / hotBase.rssMb).toFixed(2)} RSS` : ''}${coldBase ? `; cold ratio to BASELINE_ROOT ${(cold.ms / coldBase.ms).toFixed(2)}` : ''}`,
  );
  console.log(
    `  in process, without the engine: hot ${inHot.toFixed(1)} ms vs full ${inFullLive.toFixed(0)} ms (ratio ${(inHot / inFullLive).toFixed(3)}); cold ${inCold.toFixed(0)} ms vs full ${inFullDead.toFixed(0)} ms (ratio ${(inCold / inFullDead).toFixed(2)})`,
  );
  if (egressKib > 0) {
    const live = JSON.parse(hot.stdout).egress?.running;
    console.log(
      `  running pair's egress.jsonl (${egressKib} KiB) read live: ${live ? `${live.refused} refused attempts counted${live.partial ? ' (its last 256 KiB)' : ''}` : 'NOT READ'}`,
    );
  }
  console.log(
    `  hot vs full: ${same(hot.stdout, fullLive.stdout)}; cold vs full: ${same(cold.stdout, fullDead.stdout)};${hotBase ? ` hot vs BASELINE_ROOT: ${same(hot.stdout, hotBase.stdout)};` : ''} hot above the start-up floor: ${(hot.ms - version.ms).toFixed(0)} ms`,
  );

  // Side by side: one pair at 10,000 jobs, one at 10, alternating.
  const stepBig = await ledgerBookkeeping(big, live);
  const stepSmall = await ledgerBookkeeping(small, live);
  const msBig = [];
  const msSmall = [];
  for (let r = 0; r < PENDING; r++) {
    msBig.push(await stepBig());
    msSmall.push(await stepSmall());
  }
  const ledgerBig = median(msBig);
  const ledgerSmall = median(msSmall);
  const rescanBig = await rescanBookkeeping(big);
  const rescanSmall = await rescanBookkeeping(small);
  console.log(
    `supervisor bookkeeping per pair (4 journal records + 2 status.json writes), ${JOBS} vs ${SMALL} jobs:`,
  );
  console.log(
    `  ledger (now)  ${ledgerBig.toFixed(1)} ms vs ${ledgerSmall.toFixed(1)} ms   ratio ${(ledgerBig / ledgerSmall).toFixed(2)}`,
  );
  console.log(
    `  rescan (before) ${rescanBig.toFixed(1)} ms vs ${rescanSmall.toFixed(1)} ms   ratio ${(rescanBig / rescanSmall).toFixed(2)}`,
  );
} finally {
  await rm(root, { recursive: true, force: true });
}
