// The "internet" of the egress tests, run inside a network namespace of the test's own: HTTP on every address given,
// HTTPS (the test's self-signed certificate) on the first, a DNS server answering for the test's names, and a log of
// every connection and request that reached it (the proof that a refused attempt never arrived).
// argv: LOG CERT KEY DNS_ADDR NAME=ADDR,... HTTP_ADDR...
import { appendFileSync, readFileSync } from 'node:fs';
import dgram from 'node:dgram';
import http from 'node:http';
import https from 'node:https';
import type { Socket } from 'node:net';
import type { SecureContext } from 'node:tls';

const [log = '', cert = '', key = '', dnsAddress = '', names = '', ...httpAddresses] = process.argv.slice(2);
const table = new Map(names.split(',').map((pair) => pair.split('=') as [string, string]));
const note = (line: string): void => appendFileSync(log, `${line}\n`);
const answer = (req: http.IncomingMessage, res: http.ServerResponse): void => {
  note(
    `request ${req.socket.localAddress}:${req.socket.localPort} ${req.method} ${req.headers.host} ${req.url}`,
  );
  res.end(`upstream ${req.socket.localAddress} ${req.method} ${req.headers.host}\n`);
};
for (const address of httpAddresses) {
  const server = http.createServer(answer);
  server.on('connection', (s: Socket) => note(`connection ${s.localAddress ?? ''}:${s.localPort ?? 0}`));
  server.listen(80, address);
}
// The server name each ClientHello asked for (logged at the hello: the test's clients never finish the handshake).
const sni = (servername: string, callback: (err: Error | null, ctx?: SecureContext) => void): void => {
  note(`tls ${servername}`);
  callback(null, undefined);
};
const tls = https.createServer(
  { cert: readFileSync(cert), key: readFileSync(key), maxVersion: 'TLSv1.2', SNICallback: sni },
  answer,
);
tls.on('connection', (s: Socket) => note(`connection ${s.localAddress ?? ''}:${s.localPort ?? 0}`));
tls.listen(443, httpAddresses[0] ?? '');

const dns = dgram.createSocket('udp4');
dns.on('message', (msg, rinfo) => {
  let at = 12;
  const labels: string[] = [];
  for (let length = msg[at] ?? 0; length !== 0 && at < msg.length; length = msg[at] ?? 0) {
    labels.push(msg.subarray(at + 1, at + 1 + length).toString());
    at += 1 + length;
  }
  const name = labels.join('.').toLowerCase();
  const type = msg.readUInt16BE(at + 1);
  note(`dns ${name} from ${rinfo.address}`);
  // A: the names' IPv4 addresses; AAAA (28): those given as eight hex groups (issue 42's IPv6 answers).
  const known = table.get(name);
  const v6 = known !== undefined && known.includes(':');
  const address = (type === 1 && !v6) || (type === 28 && v6) ? known : undefined;
  const question = msg.subarray(12, at + 5);
  const header = Buffer.from(msg.subarray(0, 12));
  header.writeUInt16BE(address !== undefined ? 0x8180 : 0x8183, 2);
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(address !== undefined ? 1 : 0, 6);
  header.writeUInt32BE(0, 8);
  const parts = [header, question];
  if (address !== undefined) {
    const rr = Buffer.alloc(v6 ? 28 : 16);
    rr.writeUInt16BE(0xc00c, 0);
    rr.writeUInt16BE(v6 ? 28 : 1, 2);
    rr.writeUInt16BE(1, 4);
    rr.writeUInt32BE(5, 6);
    rr.writeUInt16BE(v6 ? 16 : 4, 10);
    if (v6) address.split(':').forEach((group, i) => rr.writeUInt16BE(parseInt(group, 16), 12 + 2 * i));
    else address.split('.').forEach((octet, i) => rr.writeUInt8(Number(octet), 12 + i));
    parts.push(rr);
  }
  dns.send(Buffer.concat(parts), rinfo.port, rinfo.address);
});
dns.bind(53, dnsAddress, () => note('ready'));
