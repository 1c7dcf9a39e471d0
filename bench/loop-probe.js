// Preloaded into a server by bench/serve-loop.bench.js (`--import`): every 5 ms a timer notes how late it fired (wall)
// and how much CPU the main thread used since the previous tick. A turn of the loop that held it shows in both; time
// the kernel gave other processes shows only in the wall figure. `globalThis.__loopProbe.reset()` starts a new window
// (SIGUSR2 does the same); at exit the maxima are written to LOOP_PROBE_OUT as JSON.
import { writeFileSync } from 'node:fs';

const INTERVAL_MS = 5;
let maxWallMs = 0;
let maxCpuMs = 0;
let last = performance.now();
let lastCpu = process.threadCpuUsage();
const reset = () => {
  maxWallMs = 0;
  maxCpuMs = 0;
};
setInterval(() => {
  const now = performance.now();
  const cpu = process.threadCpuUsage();
  maxWallMs = Math.max(maxWallMs, now - last - INTERVAL_MS);
  maxCpuMs = Math.max(maxCpuMs, (cpu.user - lastCpu.user + cpu.system - lastCpu.system) / 1000);
  last = now;
  lastCpu = cpu;
}, INTERVAL_MS).unref();
process.on('SIGUSR2', reset);
process.on('exit', () => {
  if (process.env.LOOP_PROBE_OUT)
    writeFileSync(process.env.LOOP_PROBE_OUT, JSON.stringify({ maxWallMs, maxCpuMs }));
});
