/**
 * A real browser for the report tests: Debian's Chromium, headless, driven over the DevTools protocol with Node's
 * own WebSocket (no puppeteer/playwright dependency: three CDP calls are all we need).
 *
 * `browserSkipReason()` installs chromium with apt when it is missing and we are root (the test set-up, as the
 * issue asks); it says why when it cannot. REQUIRE_BROWSER=1 turns that skip into a failure (CI).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const CHROMIUM = process.env['ROBOGUIDE_CHROMIUM'] ?? '/usr/bin/chromium';

/** Null when a browser is there (installed now if needed); otherwise why the browser tests skip. */
export function browserSkipReason(): string | null {
  if (existsSync(CHROMIUM)) return null;
  if (process.getuid?.() !== 0) return `no browser at ${CHROMIUM} and not root to apt-get install chromium`;
  const r = spawnSync(
    'sh',
    ['-c', 'apt-get install -y chromium || (apt-get update && apt-get install -y chromium)'],
    {
      encoding: 'utf8',
      env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
      timeout: 600_000,
    },
  );
  if (existsSync(CHROMIUM)) return null;
  return `apt-get install -y chromium failed (exit ${r.status}): ${(r.stderr || r.stdout).trim().split('\n').slice(-2).join(' / ')}`;
}

interface CdpReply {
  id?: number;
  result?: Record<string, unknown>;
  error?: { message: string };
}

export interface BrowserPage {
  /** Evaluate an expression in the page; its value comes back as JSON. */
  evaluate<T>(expression: string): Promise<T>;
  /** PNG bytes of the whole page (beyond the viewport). */
  screenshot(): Promise<Buffer>;
  close(): Promise<void>;
}

/** Open `url` in a fresh headless Chromium (own profile dir) and wait until it has loaded. */
export async function openPage(url: string, size = { width: 1400, height: 1000 }): Promise<BrowserPage> {
  const profile = await mkdtemp(join(tmpdir(), 'rg-chromium-'));
  const child: ChildProcess = spawn(
    CHROMIUM,
    [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--hide-scrollbars',
      '--remote-debugging-port=0',
      `--user-data-dir=${profile}`,
      `--window-size=${size.width},${size.height}`,
      'about:blank',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const close = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
    // Chromium's helpers (crashpad, utility) may still write into the profile for a moment after the browser
    // process exits: ENOTEMPTY, seen once in CI. rm retries it (maxRetries).
    await rm(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
  };
  try {
    const port = await new Promise<string>((resolve, reject) => {
      let text = '';
      const timer = setTimeout(
        () => reject(new Error(`chromium did not start: ${text.slice(-500)}`)),
        60_000,
      );
      child.stderr!.on('data', (chunk: Buffer) => {
        text += chunk.toString('utf8');
        const m = /DevTools listening on ws:\/\/[^:]+:(\d+)\//.exec(text);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      });
      child.once('exit', (code) => reject(new Error(`chromium exited (${code}): ${text.slice(-500)}`)));
    });
    const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as {
      type: string;
      webSocketDebuggerUrl: string;
    }[];
    const page = targets.find((t) => t.type === 'page');
    if (!page) throw new Error('chromium has no page target');
    const ws = new WebSocket(page.webSocketDebuggerUrl);
    await new Promise((resolve, reject) => {
      ws.onopen = resolve;
      ws.onerror = () => reject(new Error('cannot connect to the page over CDP'));
    });
    let nextId = 0;
    const pending = new Map<number, (reply: CdpReply) => void>();
    const events: ((method: string) => void)[] = [];
    ws.onmessage = (e: MessageEvent) => {
      const msg = JSON.parse(String(e.data)) as CdpReply & { method?: string };
      if (msg.id !== undefined) pending.get(msg.id)?.(msg);
      else if (msg.method) for (const f of events) f(msg.method);
    };
    const send = (method: string, params: Record<string, unknown> = {}): Promise<Record<string, unknown>> =>
      new Promise((resolve, reject) => {
        const id = ++nextId;
        pending.set(id, (reply) =>
          reply.error ? reject(new Error(`${method}: ${reply.error.message}`)) : resolve(reply.result ?? {}),
        );
        ws.send(JSON.stringify({ id, method, params }));
      });
    await send('Page.enable');
    const loaded = new Promise<void>((resolve) =>
      events.push((m) => m === 'Page.loadEventFired' && resolve()),
    );
    await send('Page.navigate', { url });
    await loaded;
    return {
      async evaluate<T>(expression: string): Promise<T> {
        const r = (await send('Runtime.evaluate', {
          expression,
          returnByValue: true,
          awaitPromise: true,
        })) as {
          result: { value: T };
          exceptionDetails?: { text: string };
        };
        if (r.exceptionDetails) throw new Error(`page script failed: ${r.exceptionDetails.text}`);
        return r.result.value;
      },
      async screenshot(): Promise<Buffer> {
        const metrics = (await send('Page.getLayoutMetrics')) as {
          cssContentSize: { width: number; height: number };
        };
        const { width, height } = metrics.cssContentSize;
        const clip = { x: 0, y: 0, width: Math.ceil(width), height: Math.ceil(height), scale: 1 };
        const r = (await send('Page.captureScreenshot', {
          format: 'png',
          captureBeyondViewport: true,
          clip,
        })) as { data: string };
        return Buffer.from(r.data, 'base64');
      },
      async close(): Promise<void> {
        ws.close();
        await close();
      },
    };
  } catch (err) {
    await close();
    throw err;
  }
}
