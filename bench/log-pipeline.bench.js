// The log path without the engine (issue 26): N MiB of 64-byte lines in Docker's multiplexed framing (32 KiB
// frames, as engine 20.10 sends a busy stream), demultiplexed as the runtime does (demultiplex into PassThroughs
// with the runtime's buffer), then PairLogs (redactor, LogSink into a real file, fsync and close). Prints wall time
// and CPU per MiB (process.cpuUsage), medians of alternating runs; with BASELINE_DIST=<another build's dist folder,
// absolute> that build runs alongside (BENCH_DIST=<folder> times another build than ./dist as "this build").
// Checks that every byte reached the file. BENCH_LINE=driver: the pair driver's line (docker/pair-driver/Dockerfile)
// instead of 63 x's; BASELINE_SPLIT=after: the baseline series gets this build's split buffers too (the default gives it
// the 16 KiB of before issue 26), so the two differ only in code.
// Run after the build: npx node bench/log-pipeline.bench.js [MiB] [runs]   (defaults 200, 5)
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { median } from './support.js';

const MIB = Number(process.argv[2] ?? 200);
const RUNS = Number(process.argv[3] ?? 5);
const FRAME = 32 * 1024;
/** What the runtime gives each demultiplexed stream (docker-container-runtime.ts); 16 KiB before issue 26. */
const SPLIT_HWM = { after: 256 * 1024, before: 16 * 1024 };

async function load(dist) {
  const [
    { demultiplex },
    { createRedactStream },
    { NodeFileSystem },
    { LogSink },
    { PairLogs },
    { silentLogger },
  ] = await Promise.all([
    import(`${dist}/adapters/docker/demux.js`),
    import(`${dist}/adapters/redact-stream.js`),
    import(`${dist}/adapters/fs/node-file-system.js`),
    import(`${dist}/app/evidence/log-sink.js`),
    import(`${dist}/app/pair-logs.js`),
    import(`${dist}/app/ports/logger.js`),
  ]);
  return { demultiplex, createRedactStream, fs: new NodeFileSystem(), LogSink, PairLogs, silentLogger };
}

const line = Buffer.from(
  process.env.BENCH_LINE === 'driver'
    ? 'roboguide-log-line 0123456789abcdefghijklmnopqrstuvwxyz ABCDEFG\n'
    : `${'x'.repeat(63)}\n`,
);
if (line.length !== 64) throw new Error('a line is 64 bytes');
const payload = Buffer.alloc(FRAME);
for (let i = 0; i < FRAME; i += 64) line.copy(payload, i);
const header = Buffer.alloc(8);
header[0] = 1;
header.writeUInt32BE(FRAME, 4);
const frame = Buffer.concat([header, payload]);
const frames = Math.floor((MIB * 2 ** 20) / FRAME);

function source() {
  let sent = 0;
  return new Readable({
    read() {
      while (sent < frames) {
        sent += 1;
        if (!this.push(frame)) return;
      }
      this.push(null);
    },
  });
}

async function once(m, hwm, dir) {
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  const stdout = new PassThrough({ highWaterMark: hwm });
  const stderr = new PassThrough({ highWaterMark: hwm });
  void m.demultiplex(source(), stdout, stderr);
  const openLog = async (name) => {
    const sink = new m.LogSink(await m.fs.open(join(dir, `${name}.log`), 'create-exclusive', 0o600));
    return { stream: sink, finish: () => sink.finish(), halted: sink.halted, existingBytes: 0 };
  };
  const logs = new m.PairLogs(
    {
      openLog, // builds before the OpenLogs port
      openLogs: async () => ({ stdout: await openLog('stdout'), stderr: await openLog('stderr') }),
      createRedactor: (secrets) => m.createRedactStream(secrets),
      logger: m.silentLogger,
    },
    ['supersecretvalue1', 'anothersecret22'],
    () => 'bench',
  );
  await logs.connect({ stdout, stderr }, false);
  await logs.settle(600_000);
  await logs.close(1_000, true);
  const cpu = process.cpuUsage(cpu0);
  const wallMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const size = statSync(join(dir, 'stdout.log')).size;
  if (size !== frames * FRAME) throw new Error(`stdout.log holds ${size} B, expected ${frames * FRAME}`);
  return { wallMs, cpuMsPerMiB: (cpu.user + cpu.system) / 1000 / MIB };
}

const series = [
  {
    name: 'this build',
    m: await load(resolve(process.env.BENCH_DIST ?? 'dist')),
    hwm: SPLIT_HWM.after,
    runs: [],
  },
];
if (process.env.BASELINE_DIST)
  series.push({
    name: 'BASELINE_DIST',
    m: await load(process.env.BASELINE_DIST),
    hwm: process.env.BASELINE_SPLIT === 'after' ? SPLIT_HWM.after : SPLIT_HWM.before,
    runs: [],
  });
const loadBefore = loadavg()[0];
for (let run = 0; run <= RUNS; run += 1) {
  for (const s of series) {
    const dir = mkdtempSync(join(tmpdir(), 'rg-log-pipeline-'));
    try {
      const r = await once(s.m, s.hwm, dir);
      if (run > 0) s.runs.push(r); // run 0: warm-up
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
}
console.log(
  `log pipeline bench: ${MIB} MiB of 64-byte lines (${process.env.BENCH_LINE === 'driver' ? 'pair driver' : 'x'}; baseline split ${process.env.BASELINE_SPLIT === 'after' ? '256' : '16'} KiB) in ${FRAME / 1024} KiB frames, ${RUNS} runs alternating; load average ${loadBefore.toFixed(2)} -> ${loadavg()[0].toFixed(2)}`,
);
for (const s of series) {
  const wall = median(s.runs.map((r) => r.wallMs));
  const cpu = median(s.runs.map((r) => r.cpuMsPerMiB));
  console.log(`  ${s.name.padEnd(14)} wall ${wall.toFixed(0)} ms, CPU ${cpu.toFixed(2)} ms per MiB`);
}
if (series.length === 2) {
  const [a, b] = series.map((s) => median(s.runs.map((r) => r.cpuMsPerMiB)));
  const [wa, wb] = series.map((s) => median(s.runs.map((r) => r.wallMs)));
  console.log(`  CPU ratio this/BASELINE_DIST: ${(a / b).toFixed(2)}; wall ratio ${(wa / wb).toFixed(2)}`);
}
