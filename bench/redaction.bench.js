// Throughput of the streaming redactor against a pass-through Transform, same process,
// alternating runs, 64-byte log lines without secrets (2 secrets configured).
// Needs the compiled output: `npx tsc -p tsconfig.build.json`, then
// `npx node bench/redaction.bench.js [totalMB] [runs]`. With BASELINE_DIST=<another build's dist folder>
// (e.g. the main branch compiled elsewhere), that build's redactor runs in the same alternating runs and the
// ratio of this one to it is printed too.
//
// - 64-byte writes: one line per write, as `docker attach` delivers line-buffered output (one
//   frame per line). The target: redact >= 0.8 x pass-through.
// - 64 KiB writes: the pass-through hands the same Buffer on without reading a byte, so its
//   figure is the stream machinery alone; the redactor's MB/s is its scanning speed.
// - Adversarial trickles (StreamRedactor.push one byte at a time, no stream machinery): text that
//   keeps the redactor holding back — `sk-` followed by letters (a token that never qualifies),
//   and the first 7 chars of a secret repeated (a secret form that never completes). Target:
//   >= 1 MB/s (each push must cost O(1), not a rescan of the held text).
import { Readable, Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createRedactStream } from '../dist/adapters/redact-stream.js';
import { compileRedaction } from '../dist/core/redaction/compile.js';
import { StreamRedactor } from '../dist/core/redaction/stream-redactor.js';

const BASELINE_DIST = process.env.BASELINE_DIST;
const baseline = BASELINE_DIST
  ? {
      createRedactStream: (await import(`${BASELINE_DIST}/adapters/redact-stream.js`)).createRedactStream,
      compileRedaction: (await import(`${BASELINE_DIST}/core/redaction/compile.js`)).compileRedaction,
      StreamRedactor: (await import(`${BASELINE_DIST}/core/redaction/stream-redactor.js`)).StreamRedactor,
    }
  : null;

const TOTAL_BYTES = Number(process.argv[2] ?? 100) * 1e6;
const RUNS = Number(process.argv[3] ?? 5);
const LINE_BYTES = 64;
const CHUNK_SIZES = [LINE_BYTES, 64 * 1024];
const SECRETS = ['sk-proj-Q7vJx2mB9kLp4RtY8wZc1NdF6hGs3Ae5Ui0Ko7Xb2Vn9Mq4Lr8Tz', 'p4ssw0rd-Hx8!kq2#Lm9$vN3'];

const WORDS = [
  'info',
  'debug',
  'step',
  'loss',
  'epoch',
  'task-123',
  'skeleton',
  'ghost_',
  'eval',
  'reward',
  'done',
  'GPU',
  'batch',
  'a',
  'ok',
];

/** 1 MiB of distinct 64-byte log lines (no secrets), cycled to the total. */
function template() {
  const lines = [];
  for (let i = 0; lines.length * LINE_BYTES < 1 << 20; i++) {
    let line = `2025-01-01T00:00:${String(i % 60).padStart(2, '0')}Z ${String(i).padStart(6, '0')}`;
    for (let w = i; line.length < LINE_BYTES - 1; w += 7) line += ' ' + WORDS[w % WORDS.length];
    lines.push(line.slice(0, LINE_BYTES - 1) + '\n');
  }
  return Buffer.from(lines.join(''), 'latin1');
}

const TEMPLATE = template();

function source(chunkBytes) {
  let sent = 0;
  let offset = 0;
  return new Readable({
    highWaterMark: 64 * 1024,
    read() {
      while (sent < TOTAL_BYTES) {
        if (offset + chunkBytes > TEMPLATE.length) offset = 0;
        const chunk = TEMPLATE.subarray(offset, offset + chunkBytes);
        offset += chunkBytes;
        sent += chunkBytes;
        if (!this.push(chunk)) return;
      }
      this.push(null);
    },
  });
}

/** MB per wall-clock second and per CPU second (the latter steadier on a shared machine). */
async function measure(transform, chunkBytes) {
  let received = 0;
  const sink = new Writable({
    highWaterMark: 64 * 1024,
    write(chunk, _encoding, callback) {
      received += chunk.length;
      callback();
    },
  });
  const cpuStart = process.cpuUsage();
  const start = process.hrtime.bigint();
  await pipeline(source(chunkBytes), transform, sink);
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const cpu = process.cpuUsage(cpuStart);
  if (received < TOTAL_BYTES) throw new Error(`lost bytes: ${received} of ${TOTAL_BYTES}`);
  const mb = received / 1e6;
  return { wall: mb / seconds, cpu: mb / ((cpu.user + cpu.system) / 1e6) };
}

const passThrough = () => new Transform({ transform: (chunk, _encoding, callback) => callback(null, chunk) });
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const fixed = (value) => value.toFixed(0).padStart(6);

console.log(
  `redaction bench: ${TOTAL_BYTES / 1e6} MB of ${LINE_BYTES}-byte lines, ${SECRETS.length} secrets, ` +
    `${RUNS} alternating runs each, node ${process.version}`,
);
for (const chunkBytes of CHUNK_SIZES) {
  const runs = [];
  await measure(passThrough(), chunkBytes); // warm-up
  await measure(createRedactStream(SECRETS), chunkBytes);
  for (let run = 0; run < RUNS; run++) {
    const base = await measure(passThrough(), chunkBytes);
    const redact = await measure(createRedactStream(SECRETS), chunkBytes);
    const previous = baseline ? await measure(baseline.createRedactStream(SECRETS), chunkBytes) : null;
    runs.push({ base, redact, previous });
  }
  for (const clock of ['wall', 'cpu']) {
    const ratios = runs.map((r) => r.redact[clock] / r.base[clock]);
    console.log(
      `${String(chunkBytes).padStart(6)} B writes, ${clock.padEnd(4)}: ` +
        `pass-through ${fixed(median(runs.map((r) => r.base[clock])))} MB/s, ` +
        `redact ${fixed(median(runs.map((r) => r.redact[clock])))} MB/s, ` +
        `median ratio ${median(ratios).toFixed(2)} (runs: ${ratios.map((r) => r.toFixed(2)).join(' ')})`,
    );
    if (baseline) {
      const vs = runs.map((r) => r.redact[clock] / r.previous[clock]);
      console.log(
        `${' '.repeat(6)}           baseline build: redact ${fixed(median(runs.map((r) => r.previous[clock])))} MB/s; ` +
          `this / baseline median ${median(vs).toFixed(2)} (runs: ${vs.map((r) => r.toFixed(2)).join(' ')})`,
      );
    }
  }
}
const TRICKLE_BYTES = 2e6;
const TRICKLES = {
  'sk- + letters': 'sk-' + 'abcdefghij'.repeat(TRICKLE_BYTES / 10),
  'secret prefix, repeated': SECRETS[0].slice(0, 7).repeat(TRICKLE_BYTES / 7),
};
for (const [name, text] of Object.entries(TRICKLES)) {
  const rates = { wall: [], cpu: [] };
  for (let run = 0; run < RUNS; run++) {
    const redactor = new StreamRedactor(compileRedaction(SECRETS, 'latin1-bytes'));
    const trickle = (r) => {
      let n = 0;
      for (let i = 0; i < text.length; i++) n += r.push(text[i]).length;
      return n + r.end().length;
    };
    const cpuStart = process.cpuUsage();
    const start = process.hrtime.bigint();
    const out = trickle(redactor);
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    const cpu = process.cpuUsage(cpuStart);
    if (out === 0) throw new Error('nothing came out');
    rates.wall.push(text.length / 1e6 / seconds);
    rates.cpu.push(text.length / 1e6 / ((cpu.user + cpu.system) / 1e6));
  }
  if (baseline) {
    // The baseline rescans its held text per push: a 64 KiB slice of the text is enough to time it.
    const slice = text.slice(0, 64 * 1024);
    const r = new baseline.StreamRedactor(baseline.compileRedaction(SECRETS, 'latin1-bytes'));
    const cpuStart = process.cpuUsage();
    for (let i = 0; i < slice.length; i++) r.push(slice[i]);
    r.end();
    const cpu = process.cpuUsage(cpuStart);
    console.log(
      `1-byte trickle, ${name.padEnd(24)} baseline build, 64 KiB, cpu: ${(slice.length / 1e6 / ((cpu.user + cpu.system) / 1e6)).toFixed(3)} MB/s`,
    );
  }
  for (const clock of ['wall', 'cpu']) {
    const r = rates[clock];
    console.log(
      `1-byte trickle, ${name.padEnd(24)} ${clock.padEnd(4)}: median ${median(r).toFixed(2)} MB/s (runs: ${r.map((x) => x.toFixed(2)).join(' ')}; target >= 1)`,
    );
  }
}
console.log(`peak RSS ${(process.resourceUsage().maxRSS / 1024).toFixed(0)} MiB`);
