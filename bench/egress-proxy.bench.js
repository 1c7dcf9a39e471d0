// The egress proxy's cost (issue 42): connect latency (a small HTTP GET, new connection each) and throughput
// (a 256 MiB download through a CONNECT tunnel), through the proxy against direct, side by side on loopback.
// Run: npm run build && node bench/egress-proxy.bench.js [rounds]
import http from 'node:http';
import net from 'node:net';
import { EgressProxy } from '../dist/adapters/egress/egress-proxy.js';
import { parseEgress } from '../dist/core/egress/policy.js';

const ROUNDS = Number(process.argv[2] ?? 5);
const GETS = 200;
const BYTES = 256 * 2 ** 20;
const TOKEN = 'b'.repeat(32);
const AUTH = `Basic ${Buffer.from(`rg:${TOKEN}`).toString('base64')}`;

const web = http.createServer((req, res) => res.end('ok\n'));
const bulk = net.createServer((socket) => {
  // A fake "TLS" stream: a ClientHello-shaped first read is not needed here (the tunnel checks it: see below).
  socket.once('data', () => {
    const chunk = Buffer.alloc(1 << 20, 1);
    let sent = 0;
    const pump = () => {
      while (sent < BYTES) {
        sent += chunk.length;
        if (!socket.write(chunk)) return socket.once('drain', pump);
      }
      socket.end();
    };
    pump();
  });
});
await new Promise((r) => web.listen(18180, '127.0.0.1', r));
await new Promise((r) => bulk.listen(18443, '127.0.0.1', r));
const proxy = new EgressProxy({
  listenAddress: '127.0.0.1',
  proxyPort: 18128,
  sinkPort: 18129,
  resolve: async () => ['127.0.0.1'],
  forbidden: () => false, // loopback is forbidden in production; allowed here to measure the proxy alone
  originalDestination: async () => null,
  emit: () => undefined,
});
await proxy.start();
proxy.register(
  TOKEN,
  parseEgress({ mode: 'allowlist', allow: ['web.test:18180', 'bulk.test:18443'] }).policy,
);

// A minimal TLS 1.2 ClientHello naming bulk.test (what the tunnel requires before it connects upstream).
function hello(name) {
  const sni = Buffer.from(name);
  const ext = Buffer.concat([
    Buffer.from([0, 0]),
    u16(sni.length + 5),
    u16(sni.length + 3),
    Buffer.from([0]),
    u16(sni.length),
    sni,
  ]);
  const body = Buffer.concat([
    Buffer.from([3, 3]),
    Buffer.alloc(32),
    Buffer.from([0]),
    u16(2),
    Buffer.from([0, 0x2f]),
    Buffer.from([1, 0]),
    u16(ext.length),
    ext,
  ]);
  const hs = Buffer.concat([Buffer.from([1, 0]), u16(body.length), body]);
  return Buffer.concat([Buffer.from([0x16, 3, 1]), u16(hs.length), hs]);
}
function u16(n) {
  return Buffer.from([n >> 8, n & 255]);
}

function get(viaProxy) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const req = http.request(
      viaProxy
        ? {
            host: '127.0.0.1',
            port: 18128,
            path: 'http://web.test:18180/',
            headers: { host: 'web.test:18180', 'proxy-authorization': AUTH },
            agent: false,
          }
        : { host: '127.0.0.1', port: 18180, path: '/', headers: { host: 'web.test:18180' }, agent: false },
      (res) => {
        res.resume();
        res.on('end', () => resolve(Number(process.hrtime.bigint() - t0) / 1e6));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

function download(viaProxy) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const socket = net.connect(viaProxy ? 18128 : 18443, '127.0.0.1');
    let got = 0;
    let established = !viaProxy;
    socket.on('connect', () => {
      if (viaProxy)
        socket.write(
          `CONNECT bulk.test:18443 HTTP/1.1\r\nHost: bulk.test:18443\r\nProxy-Authorization: ${AUTH}\r\n\r\n`,
        );
      socket.write(hello('bulk.test'));
    });
    socket.on('data', (chunk) => {
      if (!established) {
        const end = chunk.indexOf('\r\n\r\n');
        established = true;
        chunk = chunk.subarray(end + 4);
      }
      got += chunk.length;
    });
    socket.on('end', () => {
      const s = Number(process.hrtime.bigint() - t0) / 1e9;
      resolve(got / 2 ** 20 / s);
    });
    socket.on('error', reject);
  });
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const rows = [];
for (let round = 0; round < ROUNDS; round++) {
  const direct = [];
  const proxied = [];
  for (let i = 0; i < GETS; i++) {
    direct.push(await get(false));
    proxied.push(await get(true));
  }
  const mbDirect = await download(false);
  const mbProxy = await download(true);
  rows.push({ getDirect: median(direct), getProxy: median(proxied), mbDirect, mbProxy });
  console.log(
    `round ${round + 1}: GET median direct ${median(direct).toFixed(3)} ms, proxy ${median(proxied).toFixed(3)} ms; download direct ${mbDirect.toFixed(0)} MiB/s, proxy ${mbProxy.toFixed(0)} MiB/s`,
  );
}
const m = (k) => median(rows.map((r) => r[k]));
console.log(
  `median of ${ROUNDS} rounds: GET direct ${m('getDirect').toFixed(3)} ms, through the proxy ${m('getProxy').toFixed(3)} ms (×${(m('getProxy') / m('getDirect')).toFixed(2)}); download direct ${m('mbDirect').toFixed(0)} MiB/s, through the proxy ${m('mbProxy').toFixed(0)} MiB/s (×${(m('mbProxy') / m('mbDirect')).toFixed(2)})`,
);
await proxy.close();
web.close();
bulk.close();
