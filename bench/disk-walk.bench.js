// Cost of one disk measurement of a pair (issue 22): the walk of a cwd of 100,000 files (1,000 folders of 100
// files, 1 KiB each) by the DiskUsageWalker the disk watch uses, with its default budget (DISK_WALK_BUDGET).
// Prints the median and p99 per poll (wall clock and CPU time), and the share of a 10 s interval that is.
// Needs the compiled output: `npm run build`, then `node bench/disk-walk.bench.js [polls] [files]` (defaults 50, 100000).
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { DiskUsageWalker } from '../dist/adapters/fs/disk-usage-walker.js';
import { DISK_POLL_INTERVAL_MS, DISK_WALK_BUDGET } from '../dist/app/pair/disk-watch.js';
import { elapsedMsSince, median } from './support.js';

const POLLS = Number(process.argv[2] ?? 50);
const FILES = Number(process.argv[3] ?? 100_000);
const PER_FOLDER = 100;

function percentile(values, p) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

const root = await mkdtemp(join(tmpdir(), 'disk-walk-bench-'));
try {
  const cwd = join(root, 'cwd');
  const data = Buffer.alloc(1024, 97);
  for (let folder = 0; folder * PER_FOLDER < FILES; folder++) {
    const dir = join(cwd, `d${folder}`);
    await mkdir(dir, { recursive: true });
    const count = Math.min(PER_FOLDER, FILES - folder * PER_FOLDER);
    await Promise.all(Array.from({ length: count }, (_, i) => writeFile(join(dir, `f${i}`), data)));
  }
  const walker = new DiskUsageWalker();
  const loadBefore = loadavg()[0];
  await walker.measure([cwd], DISK_WALK_BUDGET); // warm-up: JIT and the dentry cache, as every poll after the first
  const times = [];
  const cpu = [];
  let last;
  for (let i = 0; i < POLLS; i++) {
    const started = process.hrtime.bigint();
    const cpuBefore = process.cpuUsage();
    last = await walker.measure([cwd], DISK_WALK_BUDGET);
    const used = process.cpuUsage(cpuBefore);
    times.push(elapsedMsSince(started));
    cpu.push((used.user + used.system) / 1000);
  }
  const med = median(times);
  const p99 = percentile(times, 99);
  console.log(
    `disk walk bench: ${FILES} files in ${Math.ceil(FILES / PER_FOLDER)} folders, ${POLLS} polls; load average ${loadBefore.toFixed(2)} -> ${loadavg()[0].toFixed(2)}`,
  );
  console.log(
    `  per poll: median ${med.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms, max ${Math.max(...times).toFixed(1)} ms`,
  );
  console.log(
    `  CPU time per poll (user + system, less sensitive to a loaded machine): median ${median(cpu).toFixed(1)} ms, p99 ${percentile(cpu, 99).toFixed(1)} ms`,
  );
  console.log(`  walk saw ${last.entries} entries, ${last.bytes} bytes, complete ${last.complete}`);
  console.log(
    `  share of a ${DISK_POLL_INTERVAL_MS / 1000} s interval: median ${((med / DISK_POLL_INTERVAL_MS) * 100).toFixed(1)} %`,
  );
} finally {
  await rm(root, { recursive: true, force: true });
}
