#!/usr/bin/env node
// Produces test/fixtures/codex/<version>/<case>/ from the REAL Codex CLI (issue 17). Not part of CI.
//
//   npm run fixtures:codex                       # the default versions below
//   npm run fixtures:codex -- 0.171.0 0.60.1     # only these
//
// For each version: `npm install @openai/codex@<version>` into a temporary folder (the package
// ships its native binary), then for each case run `codex exec` non-interactively with
// CODEX_HOME in a temporary folder and a config whose model provider points at the mock
// Responses server below (127.0.0.1 only), and copy the rollout files it wrote, scrubbed of
// absolute paths and nothing else, into the fixtures folder. Network: the npm registry (install)
// and 127.0.0.1 (the mock). Set CODEX_FIXTURES_CACHE=/some/dir to reuse installs between runs.
import { spawn, spawnSync } from 'node:child_process';
import { cp, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = join(dirname(fileURLToPath(import.meta.url)), '..');
const FIXTURES = join(REPO, 'test', 'fixtures', 'codex');
const DEFAULT_VERSIONS = ['0.60.1', '0.93.0', '0.124.0', '0.144.6', '0.171.0'];
const CASES = [
  '429',
  '500',
  '503',
  'usage_limit',
  'stream_rate_limit',
  'dropped_stream',
  'success',
  'interrupted',
  'app_server_429',
];
/** Cases run through `codex app-server` (JSON-RPC on stdio, a thread with persistExtendedHistory) instead of `codex exec`. */
const APP_SERVER_PREFIX = 'app_server_';
const mockCaseOf = (kase) =>
  kase.startsWith(APP_SERVER_PREFIX) ? kase.slice(APP_SERVER_PREFIX.length) : kase;
const APP_SERVER_TIMEOUT_MS = 30_000;
const RUN_TIMEOUT_MS = 120_000;
const INTERRUPT_AFTER_MS = 1_500;

// ---------------------------------------------------------------------------------------------
// The mock Responses server. The case is the first path segment: /<case>/v1/responses.

function sse(res, events) {
  for (const event of events) res.write(`event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`);
}

const created = { type: 'response.created', response: { id: 'resp_mock' } };
const usage = {
  input_tokens: 10,
  input_tokens_details: { cached_tokens: 0 },
  output_tokens: 5,
  output_tokens_details: { reasoning_tokens: 0 },
  total_tokens: 15,
};
const message = {
  type: 'message',
  role: 'assistant',
  id: 'msg_mock',
  content: [{ type: 'output_text', text: 'Hello from the mock.', annotations: [] }],
};

function startSse(res) {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
}

/** Answers one POST /<case>/v1/responses; `onHang` is told when a response is held open. */
function answer(kase, res, onHang) {
  switch (kase) {
    case '429':
      res.writeHead(429, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          error: { type: 'rate_limit_error', code: 'rate_limit_exceeded', message: 'Too Many Requests' },
        }),
      );
      return;
    case '500':
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { type: 'server_error', message: 'Internal Server Error' } }));
      return;
    case '503':
      res.writeHead(503, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { type: 'server_error', message: 'Service Unavailable' } }));
      return;
    case 'usage_limit':
      res.writeHead(429, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          error: {
            type: 'usage_limit_reached',
            message: 'You have hit your usage limit.',
            plan_type: 'plus',
            resets_in_seconds: 3600,
          },
        }),
      );
      return;
    case 'stream_rate_limit':
      startSse(res);
      sse(res, [
        created,
        {
          type: 'response.failed',
          response: {
            id: 'resp_mock',
            error: {
              code: 'rate_limit_exceeded',
              message: 'Rate limit reached for requests. Please try again in 0.2s.',
            },
          },
        },
      ]);
      res.end();
      return;
    case 'dropped_stream':
      startSse(res);
      sse(res, [created]);
      res.end(); // closed before response.completed
      return;
    case 'success':
      startSse(res);
      sse(res, [
        created,
        { type: 'response.output_item.done', item: message },
        { type: 'response.completed', response: { id: 'resp_mock', usage } },
      ]);
      res.end();
      return;
    case 'interrupted':
      startSse(res);
      sse(res, [created]);
      onHang(); // held open until the client goes away
      return;
    default:
      res.writeHead(404).end();
  }
}

function startMock(onHang) {
  const seen = [];
  const server = createServer((req, res) => {
    const [, kase = '', ...rest] = (req.url ?? '').split('?')[0].split('/');
    const path = `/${rest.join('/')}`;
    seen.push(`${kase} ${req.method} ${path}`);
    req.resume();
    req.on('end', () => {
      if (req.method === 'POST' && path.endsWith('/responses')) answer(kase, res, () => onHang(kase));
      else if (req.method === 'GET' && path.endsWith('/models')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ object: 'list', data: [], models: [] }));
      } else res.writeHead(404).end();
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve({ server, seen, port: server.address().port })),
  );
}

// ---------------------------------------------------------------------------------------------
// Installing and running Codex.

function install(version, root) {
  const dir = join(root, version);
  const bin = join(dir, 'node_modules', '.bin', 'codex');
  if (spawnSync(bin, ['--version'], { encoding: 'utf8' }).status === 0) return bin;
  spawnSync('mkdir', ['-p', dir]);
  spawnSync('sh', ['-c', `echo '{"private":true}' > package.json`], { cwd: dir });
  const r = spawnSync('npm', ['install', '--no-audit', '--no-fund', `@openai/codex@${version}`], {
    cwd: dir,
    encoding: 'utf8',
  });
  if (r.status !== 0) throw new Error(`npm install @openai/codex@${version} failed:\n${r.stderr}`);
  return bin;
}

function configToml(port, kase) {
  return [
    'model = "gpt-5-mock"',
    'model_provider = "mock"',
    'approval_policy = "never"',
    'sandbox_mode = "read-only"',
    '',
    '[model_providers.mock]',
    'name = "mock"',
    `base_url = "http://127.0.0.1:${port}/${mockCaseOf(kase)}/v1"`,
    'wire_api = "responses"',
    'env_key = "MOCK_API_KEY"',
    'request_max_retries = 1',
    'stream_max_retries = 1',
    'stream_idle_timeout_ms = 5000',
    '',
  ].join('\n');
}

/**
 * Runs one `codex exec` in its own process group (the npm wrapper is a node process that spawns the
 * native binary: signals go to the group, as a terminal's Ctrl-C would); resolves with its exit.
 */
function runCodex(bin, home, work, kase, hangs) {
  return new Promise((resolve) => {
    const child = spawn(bin, ['exec', '--skip-git-repo-check', 'Say hello.'], {
      cwd: work,
      detached: true,
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: home,
        CODEX_HOME: join(home, '.codex'),
        MOCK_API_KEY: 'mock-key',
        RUST_LOG: 'error',
        TERM: 'dumb',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const signalGroup = (signal) => {
      try {
        process.kill(-child.pid, signal);
      } catch {
        // already gone
      }
    };
    let output = '';
    let killed = false;
    const keep = (chunk) => {
      output = (output + chunk.toString('utf8')).slice(-4000);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    const kill = setTimeout(() => {
      killed = true;
      signalGroup('SIGKILL');
    }, RUN_TIMEOUT_MS);
    const onHang = () =>
      setTimeout(() => {
        signalGroup('SIGINT');
        // A version that ignores the interrupt is killed after a grace period (and says so in runs.json).
        setTimeout(() => {
          killed = true;
          signalGroup('SIGKILL');
        }, 10_000).unref();
      }, INTERRUPT_AFTER_MS);
    if (kase === 'interrupted') hangs.once('interrupted', onHang);
    child.on('exit', (code, signal) => {
      clearTimeout(kill);
      hangs.off('interrupted', onHang);
      signalGroup('SIGKILL'); // nothing of this run outlives it
      resolve({ code, signal, killed, output });
    });
  });
}

/**
 * One turn through `codex app-server`: initialize, thread/start with persistExtendedHistory (the mode
 * in which Codex also persists a separate `error` event), turn/start, and stop at turn/completed. A
 * version that does not speak this protocol is stopped after APP_SERVER_TIMEOUT_MS.
 */
function runAppServer(bin, home, work) {
  return new Promise((resolve) => {
    const child = spawn(bin, ['app-server'], {
      cwd: work,
      detached: true,
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: home,
        CODEX_HOME: join(home, '.codex'),
        MOCK_API_KEY: 'mock-key',
        RUST_LOG: 'error',
        TERM: 'dumb',
      },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const send = (message) => child.stdin.write(`${JSON.stringify(message)}\n`);
    const stop = (signal) => {
      try {
        process.kill(-child.pid, signal);
      } catch {
        // already gone
      }
    };
    let killed = false;
    let output = '';
    let pending = '';
    child.stderr.on('data', (chunk) => {
      output = (output + chunk.toString('utf8')).slice(-4000);
    });
    child.stdout.on('data', (chunk) => {
      pending += chunk.toString('utf8');
      for (let newline = pending.indexOf('\n'); newline !== -1; newline = pending.indexOf('\n')) {
        const line = pending.slice(0, newline);
        pending = pending.slice(newline + 1);
        let message;
        try {
          message = JSON.parse(line);
        } catch {
          continue;
        }
        if (message.id === 1 && message.result !== undefined) {
          send({ method: 'initialized' });
          send({ id: 2, method: 'thread/start', params: { cwd: work, persistExtendedHistory: true } });
        } else if (message.id === 2 && message.result !== undefined) {
          const threadId = message.result.thread?.id;
          send({
            id: 3,
            method: 'turn/start',
            params: { threadId, input: [{ type: 'text', text: 'Say hello.' }] },
          });
        } else if (message.method === 'turn/completed') {
          setTimeout(() => stop('SIGTERM'), 500).unref();
        } else if (message.error !== undefined) {
          output = (output + JSON.stringify(message.error)).slice(-4000);
          stop('SIGTERM');
        }
      }
    });
    send({
      id: 1,
      method: 'initialize',
      params: {
        clientInfo: { name: 'roboguide-fixtures', version: '1' },
        capabilities: { experimentalApi: true },
      },
    });
    const timer = setTimeout(() => {
      killed = true;
      stop('SIGKILL');
    }, APP_SERVER_TIMEOUT_MS);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      stop('SIGKILL');
      resolve({ code, signal, killed, output });
    });
  });
}

async function filesUnder(dir) {
  const out = [];
  let entries = [];
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return out;
  }
  for (const e of entries) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await filesUnder(p)));
    else if (e.isFile()) out.push(p);
  }
  return out;
}

/** Replaces every absolute path we created (plain and JSON-escaped) by a placeholder. */
function scrub(text, roots) {
  let out = text;
  for (const [path, placeholder] of roots) {
    out = out.split(path).join(placeholder);
    out = out.split(JSON.stringify(path).slice(1, -1)).join(placeholder);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------

const { EventEmitter } = await import('node:events');
const versions = process.argv.slice(2).length > 0 ? process.argv.slice(2) : DEFAULT_VERSIONS;
const cache = process.env.CODEX_FIXTURES_CACHE;
const installRoot = cache ?? (await mkdtemp(join(tmpdir(), 'codex-install-')));
const scratch = await mkdtemp(join(tmpdir(), 'codex-fixtures-'));
const hangs = new EventEmitter();
const { server, seen, port } = await startMock((kase) => hangs.emit(kase));
const report = [];
try {
  for (const version of versions) {
    let bin;
    try {
      bin = install(version, installRoot);
    } catch (err) {
      report.push({ requested: version, case: '*', error: String(err).slice(0, 500) });
      console.error(String(err));
      continue;
    }
    const versionOut = spawnSync(bin, ['--version'], { encoding: 'utf8' }).stdout.trim();
    for (const kase of CASES) {
      const home = join(scratch, `${version}-${kase}`);
      const work = join(home, 'work');
      await mkdir(join(home, '.codex'), { recursive: true });
      await mkdir(work, { recursive: true });
      await writeFile(join(home, '.codex', 'config.toml'), configToml(port, kase));
      const before = seen.length;
      const run = kase.startsWith(APP_SERVER_PREFIX)
        ? await runAppServer(bin, home, work)
        : await runCodex(bin, home, work, kase, hangs);
      const requests = seen.slice(before);
      const sessions = join(home, '.codex', 'sessions');
      const rollouts = (await filesUnder(sessions)).filter((p) => /\.jsonl(\.zst)?$/.test(p));
      const dest = join(FIXTURES, version, kase);
      await rm(dest, { recursive: true, force: true });
      const roots = [
        [work, '/scrubbed/work'],
        [join(home, '.codex'), '/scrubbed/codex-home'],
        [home, '/scrubbed/home'],
        [scratch, '/scrubbed'],
        [installRoot, '/scrubbed/install'],
      ];
      for (const file of rollouts) {
        const target = join(dest, relative(sessions, file));
        await mkdir(dirname(target), { recursive: true });
        if (file.endsWith('.zst')) await cp(file, target);
        else await writeFile(target, scrub(await readFile(file, 'utf8'), roots));
      }
      const bytes = (await Promise.all(rollouts.map(async (f) => (await stat(f)).size))).reduce(
        (a, b) => a + b,
        0,
      );
      const entry = {
        requested: version,
        version: versionOut,
        case: kase,
        exit: run.code ?? run.signal,
        killed_after_timeout: run.killed,
        rollouts: rollouts.length,
        bytes,
        responses_requests: requests.filter((r) => r.includes('/responses')).length,
      };
      report.push(entry);
      console.log(JSON.stringify(entry));
      if (rollouts.length === 0) console.log(`  output tail: ${scrub(run.output, roots).slice(-600)}`);
    }
  }
} finally {
  server.closeAllConnections();
  server.close();
  await rm(scratch, { recursive: true, force: true });
  if (cache === undefined) await rm(installRoot, { recursive: true, force: true });
}
// runs.json keeps the entries of versions not run this time.
await mkdir(FIXTURES, { recursive: true });
const runsPath = join(FIXTURES, 'runs.json');
const previous = JSON.parse(await readFile(runsPath, 'utf8').catch(() => '[]'));
const kept = previous.filter((e) => !versions.includes(e.requested));
await writeFile(runsPath, `${JSON.stringify([...kept, ...report], null, 2)}\n`);
