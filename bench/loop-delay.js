// Preloaded into a server by bench/serve-sessions.bench.js (`--import`): perf_hooks' event-loop delay histogram
// (10 ms resolution) over the server's life, written at exit to LOOP_DELAY_OUT as JSON (milliseconds).
import { writeFileSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';

const histogram = monitorEventLoopDelay({ resolution: 10 });
histogram.enable();
process.on('exit', () => {
  if (!process.env.LOOP_DELAY_OUT) return;
  const ms = (ns) => Math.round(ns / 1e5) / 10;
  writeFileSync(
    process.env.LOOP_DELAY_OUT,
    JSON.stringify({
      p50: ms(histogram.percentile(50)),
      p99: ms(histogram.percentile(99)),
      max: ms(histogram.max),
      samples: histogram.count,
    }),
  );
});
