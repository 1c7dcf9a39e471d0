// Provider-failure diagnosis cost must not depend on session file size (SPEC §6).
// Builds 32 sparse session files of 10 MB and 32 of 1 GB (ftruncate, then a real JSONL tail
// written at the end), runs readSessionFiles + diagnoseSessionTails on each set several times,
// and prints both medians and their ratio, which must stay near 1.
// Run after the build: npx tsc -p tsconfig.build.json && node bench/reducer.bench.js
import { mkdir, mkdtemp, open, rm, utimes } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readSessionFiles } from '../dist/adapters/session-tails.js';
import { diagnoseSessionTails, MAX_SESSION_FILES } from '../dist/core/provider-failure.js';

const SMALL_BYTES = 10 * 1000 * 1000;
const LARGE_BYTES = 1000 * 1000 * 1000;
const TAIL_BYTES = 1536 * 1024;
const RUNS = 9;
const EXPECTED = {
  schema: 'roboguide.provider_failure/v1',
  kind: 'response_too_many_failed_attempts',
  http_status: 429,
};

function line(type, payload) {
  return `${JSON.stringify({ timestamp: new Date(1_700_000_000_000).toISOString(), type, payload })}\n`;
}

/**
 * A realistic rollout tail: messages, function calls, token counts inside one turn; the oldest
 * file's turn ends the way Codex 0.171 ends a 429 (task_complete carrying the error), the others'
 * turns never end (the reducer reads every line of them).
 */
function sessionTail(isOldest) {
  const text = 'The quick brown fox reads the stack trace and patches the failing test. '.repeat(24);
  const lines = [line('event_msg', { type: 'task_started', turn_id: 'turn-1' })];
  let size = 0;
  for (let i = 0; size < TAIL_BYTES; i += 1) {
    const next =
      i % 3 === 0
        ? line('response_item', {
            type: 'message',
            role: 'assistant',
            content: [{ type: 'output_text', text }],
          })
        : i % 3 === 1
          ? line('response_item', {
              type: 'function_call',
              name: 'shell',
              arguments: JSON.stringify({ cmd: text }),
            })
          : line('event_msg', { type: 'token_count', info: { total_token_usage: { input_tokens: i } } });
    lines.push(next);
    size += Buffer.byteLength(next);
  }
  lines.push(line('event_msg', { type: 'stream_error', message: 'retrying 5/5' }));
  if (isOldest) {
    lines.push(
      line('event_msg', {
        type: 'task_complete',
        turn_id: 'turn-1',
        last_agent_message: null,
        error: {
          message: 'exceeded retry limit, last status: 429 Too Many Requests',
          codex_error_info: { response_too_many_failed_attempts: { http_status_code: 429 } },
        },
      }),
    );
  }
  return Buffer.from(lines.join(''));
}

async function writeSparse(path, sizeBytes, tail) {
  const handle = await open(path, 'w');
  try {
    await handle.truncate(sizeBytes - tail.length);
    await handle.write(tail, 0, tail.length, sizeBytes - tail.length);
  } finally {
    await handle.close();
  }
}

async function buildSet(dir, sizeBytes) {
  await mkdir(dir);
  for (let i = 0; i < MAX_SESSION_FILES; i += 1) {
    const path = join(dir, `rollout-${String(i).padStart(2, '0')}.jsonl`);
    await writeSparse(path, sizeBytes, sessionTail(i === 0));
    const mtimeSec = 1_700_000_000 + i;
    await utimes(path, mtimeSec, mtimeSec);
  }
}

async function timeOnce(dir) {
  const started = process.hrtime.bigint();
  const failure = diagnoseSessionTails((await readSessionFiles(dir)).tails).provider_failure;
  const elapsedMs = Number(process.hrtime.bigint() - started) / 1e6;
  if (JSON.stringify(failure) !== JSON.stringify(EXPECTED)) {
    throw new Error(`unexpected diagnosis in ${dir}: ${JSON.stringify(failure)}`);
  }
  return elapsedMs;
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

const root = await mkdtemp(join(tmpdir(), 'reducer-bench-'));
try {
  const smallDir = join(root, 'small-10MB');
  const largeDir = join(root, 'large-1GB');
  await buildSet(smallDir, SMALL_BYTES);
  await buildSet(largeDir, LARGE_BYTES);
  await timeOnce(smallDir); // warm-up: JIT and page cache
  await timeOnce(largeDir);
  const small = [];
  const large = [];
  for (let run = 0; run < RUNS; run += 1) {
    small.push(await timeOnce(smallDir));
    large.push(await timeOnce(largeDir));
  }
  const smallMs = median(small);
  const largeMs = median(large);
  console.log(
    `reducer bench: ${MAX_SESSION_FILES} files per set, ${RUNS} runs, ${TAIL_BYTES} B JSONL tail per file`,
  );
  console.log(`  32 x 10 MB: median ${smallMs.toFixed(1)} ms`);
  console.log(`  32 x 1 GB : median ${largeMs.toFixed(1)} ms`);
  console.log(`  ratio 1 GB / 10 MB: ${(largeMs / smallMs).toFixed(2)}`);
} finally {
  await rm(root, { recursive: true, force: true });
}
