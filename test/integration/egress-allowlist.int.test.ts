import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { noDocker } from '../support/docker.js';
import { egressRecords, HELPERS } from '../support/egress-pair.js';
import { ALLOWED, DNS, OTHER, POLICY, startEgressWorld, type EgressWorld } from '../support/egress-world.js';
import { isAlive, namespaceSupportProblem } from '../support/second-engine.js';

/**
 * Egress allowlist (issue 42) on a throwaway engine with its own firewall, in its own network namespace: nothing
 * here touches this machine's rules or the shared pairs network. A second namespace plays the internet (HTTP and
 * HTTPS servers, a DNS server answering for the test's names, a log of everything that reached them):
 * test/support/egress-world.ts.
 */
const required = process.env['REQUIRE_DOCKER'] === '1';
const namespaceProblem = noDocker ? 'no Docker engine' : await namespaceSupportProblem();
const skip = namespaceProblem !== null && !required;
if (skip) console.warn(`\n*** egress allowlist on a throwaway engine SKIPPED: ${namespaceProblem} ***\n`);

const SECRET = `sk-egress-${Math.random().toString(36).slice(2)}`;

describe.skipIf(skip)(
  'egress allowlist: the proxy, the firewall and egress.jsonl on a throwaway engine',
  () => {
    let world: EgressWorld;
    let tag = '';
    let upstreamLog = '';
    let stopFlag = '';
    let work = '';

    beforeAll(async () => {
      if (namespaceProblem !== null)
        throw new Error(`REQUIRE_DOCKER=1 but a second engine cannot be started: ${namespaceProblem}`);
      world = await startEgressWorld('eg42');
      ({ tag, upstreamLog, stopFlag, work } = world);
    });

    afterAll(async () => {
      await world?.stop();
    });

    const pair = (jobId: string, script: string, egress: unknown, files: Record<string, Buffer> = {}) =>
      world.pair(jobId, script, egress, { files, secret: SECRET });
    const proxyPids = () => world.proxyPids();

    const out = (cwd: string, name: string) =>
      readFile(join(cwd, `out-${name}`)).catch(() => Buffer.alloc(0));
    it('an allowlisted pair reaches its hosts over HTTP and through CONNECT, and nothing else; every attempt is in egress.jsonl, masked', async () => {
      const script = [
        HELPERS,
        `req http-allowed "GET http://allowed.test/a?key=$API_TOKEN" allowed.test`,
        'tunnel https-allowed allowed.test:443 hello-allowed.bin',
        'tunnel https-wildcard api.anthropic.test:443 hello-api.bin',
        `req not-listed 'GET http://other.test/' other.test`,
        `req direct-ip 'GET http://${ALLOWED}/' ${ALLOWED}`,
        `req sibling 'GET http://evil-anthropic.test/' evil-anthropic.test`,
        `req host-header 'GET http://allowed.test/' other.test`,
        'tunnel sni-mismatch allowed.test:443 hello-other.bin',
        `tunnel ipv6 '[2001:db8::10]:443' hello-allowed.bin`,
        `req method 'POST http://allowed.test/' allowed.test`,
        `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 6 nc -w 3 ${ALLOWED} 80 > out-raw-tcp 2>&1`,
        `timeout 6 nslookup allowed.test ${DNS} > out-dns-outside 2>&1`,
        'timeout 6 nslookup allowed.test > out-dns-embedded 2>&1',
        'timeout 6 nc -w 3 2001:db8::10 80 < /dev/null > out-ipv6-direct 2>&1',
        `printf 'GET http://allowed.test/ HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n' | timeout 6 nc -w 3 $PH $PP > out-no-auth 2>&1`,
        'true',
      ].join('\n');
      const jobId = `eg42-attacks-${tag}`;
      const { hellos } = world;
      const { result, dir, cwd } = await pair(jobId, script, POLICY, {
        'hello-allowed.bin': hellos['allowed.test'] ?? Buffer.alloc(0),
        'hello-api.bin': hellos['api.anthropic.test'] ?? Buffer.alloc(0),
        'hello-other.bin': hellos['other.test'] ?? Buffer.alloc(0),
      });
      expect(result.classification).toBe('completed');
      // What the pair saw.
      expect((await out(cwd, 'http-allowed')).toString()).toContain(`upstream ${ALLOWED} GET allowed.test`);
      for (const name of ['https-allowed', 'https-wildcard']) {
        const bytes = await out(cwd, name);
        const head = bytes.indexOf('\r\n\r\n');
        expect(bytes.subarray(0, head).toString(), name).toContain('200 Connection Established');
        // The server's certificate (TLS 1.2 sends it in the clear): the upstream answered through the tunnel.
        expect(bytes.subarray(head + 4).includes('allowed.test'), name).toBe(true);
      }
      for (const name of ['not-listed', 'direct-ip', 'sibling', 'host-header', 'method', 'ipv6'])
        expect((await out(cwd, name)).toString(), name).toMatch(/^HTTP\/1\.1 403/);
      expect((await out(cwd, 'no-auth')).toString()).toMatch(/^HTTP\/1\.1 407/);
      const sni = await out(cwd, 'sni-mismatch');
      expect(
        sni.subarray(sni.indexOf('\r\n\r\n') + 4).length,
        'nothing came back through a tunnel whose SNI differs',
      ).toBe(0);
      expect((await out(cwd, 'raw-tcp')).toString()).not.toContain('upstream');
      expect((await out(cwd, 'dns-outside')).toString()).not.toContain(ALLOWED);
      expect((await out(cwd, 'dns-embedded')).toString()).not.toContain(ALLOWED);
      // What reached the internet: the allowed request and the two allowed tunnels, the proxy's own DNS queries, nothing else.
      const upstream = (await readFile(upstreamLog, 'utf8')).split('\n');
      expect(upstream.filter((l) => l.startsWith('request '))).toEqual([
        `request ${ALLOWED}:80 GET allowed.test /a?key=${SECRET}`,
      ]);
      expect(upstream.filter((l) => l.startsWith('tls ')).sort()).toEqual([
        'tls allowed.test',
        'tls api.anthropic.test',
      ]);
      expect(upstream.filter((l) => l.startsWith('connection ')).sort()).toEqual([
        `connection ${ALLOWED}:443`,
        `connection ${ALLOWED}:443`,
        `connection ${ALLOWED}:80`,
      ]);
      expect(upstream.filter((l) => l.startsWith('dns ') && !l.endsWith('from 198.18.0.1'))).toEqual([]);
      // Every attempt is in egress.jsonl.
      const lines = await egressRecords(dir);
      const find = (via: string, host: string | null, decision: string, reason?: string) =>
        lines.find(
          (r) =>
            r.via === via &&
            (host === null || r.host === host || r.address === host) &&
            r.decision === decision &&
            (reason === undefined || r.reason === reason),
        );
      expect(find('http', 'allowed.test', 'allowed')).toMatchObject({
        address: ALLOWED,
        port: 80,
        method: 'GET',
        status: 200,
      });
      expect(find('connect', 'allowed.test', 'allowed')).toMatchObject({
        sni: 'allowed.test',
        address: ALLOWED,
        port: 443,
      });
      expect(find('connect', 'allowed.test', 'allowed')?.bytes_down).toBeGreaterThan(0);
      expect(find('connect', 'api.anthropic.test', 'allowed')).toBeDefined();
      expect(find('http', 'other.test', 'refused', 'host_not_allowed')).toBeDefined();
      expect(find('http', ALLOWED, 'refused', 'host_not_allowed')).toBeDefined();
      expect(find('http', 'evil-anthropic.test', 'refused', 'host_not_allowed')).toBeDefined();
      expect(find('http', 'allowed.test', 'refused', 'host_header_mismatch')).toBeDefined();
      expect(find('connect', 'allowed.test', 'refused', 'sni_mismatch')).toMatchObject({ sni: 'other.test' });
      expect(find('connect', '2001:db8::10', 'refused', 'host_not_allowed')).toBeDefined();
      expect(find('http', 'allowed.test', 'refused', 'method_not_allowed')).toMatchObject({ method: 'POST' });
      expect(find('http', 'allowed.test', 'refused', 'unknown_client')).toBeDefined();
      expect(find('tcp', ALLOWED, 'refused', 'not_through_proxy')).toMatchObject({ port: 80 });
      expect(find('udp', DNS, 'refused', 'not_through_proxy')).toMatchObject({
        port: 53,
        host: 'allowed.test',
      });
      // Masked: the secret in a URL never reaches the evidence, nor does the proxy token.
      const text = await readFile(join(dir, 'evidence', 'egress.jsonl'), 'utf8');
      expect(text).not.toContain(SECRET);
      expect(find('http', 'allowed.test', 'allowed')?.target).toContain('key=');
      // The summary and the receipt.
      expect(result.egress).toMatchObject({ mode: 'allowlist', allowed: 3 });
      expect(result.egress?.refused).toBeGreaterThanOrEqual(12);
      expect(result.egress?.refused_hosts).toContain('other.test:80');
      const receipt = JSON.parse(await readFile(join(dir, 'evidence', 'receipt.json'), 'utf8')) as Record<
        string,
        unknown
      >;
      expect(receipt['egress']).toEqual(POLICY);
      expect(receipt['network']).toEqual({ choice: 'allowlist', engine_network: 'roboguide-egress' });
      expect(result.cleanup).toMatchObject({ removed: true, verified_absent: true });
    });

    it('"open" and "none" behave as network bridge and none did: open reaches any host directly, none nothing; no egress.jsonl', async () => {
      const probe = `printf 'GET / HTTP/1.0\\r\\nHost: other.test\\r\\n\\r\\n' | timeout 6 nc -w 3 ${OTHER} 80 > out-direct 2>&1; true`;
      const open = await pair(`eg42-open-${tag}`, probe, { mode: 'open' });
      expect((await out(open.cwd, 'direct')).toString()).toContain(`upstream ${OTHER} GET other.test`);
      const none = await pair(`eg42-none-${tag}`, probe, { mode: 'none' });
      expect((await out(none.cwd, 'direct')).toString()).not.toContain('upstream');
      for (const [p, choice] of [
        [open, 'bridge'],
        [none, 'none'],
      ] as const) {
        const receipt = JSON.parse(await readFile(join(p.dir, 'evidence', 'receipt.json'), 'utf8')) as Record<
          string,
          unknown
        >;
        expect((receipt['network'] as { choice: string }).choice).toBe(choice);
        expect(p.result.egress).toBeUndefined();
        await expect(readFile(join(p.dir, 'evidence', 'egress.jsonl'))).rejects.toThrow();
      }
    });

    it("pairs that connect directly as soon as they run and exit at once, two at a time (the engine gives a freed address to the next container at once): each pair's egress.jsonl has its own attempt, and no other's", async () => {
      const ports = Array.from({ length: 12 }, (_, i) => 8_100 + i);
      const run = (port: number) =>
        pair(
          `eg42-last-${port}-${tag}`,
          // The attempt as soon as it runs, then the exit: gone before the engine could be asked its address.
          `printf 'x' | timeout 6 nc -w 1 ${ALLOWED} ${port} > /dev/null 2>&1; ` +
            'cat /sys/class/net/eth0/address > mac; ip -4 -o addr show eth0 > ip; true',
          POLICY,
        );
      const outcomes: Awaited<ReturnType<typeof run>>[] = [];
      for (let i = 0; i < ports.length; i += 2)
        outcomes.push(...(await Promise.all(ports.slice(i, i + 2).map((port) => run(port)))));
      const macs = new Set<string>();
      for (const [i, outcome] of outcomes.entries()) {
        expect(outcome.result.classification, JSON.stringify(outcome.result)).toBe('completed');
        const tcp = (await egressRecords(outcome.dir)).filter((r) => r.via === 'tcp');
        expect(
          tcp.map((r) => `${r.address ?? '?'}:${r.port ?? '?'} ${r.reason ?? ''}`),
          `pair ${i}`,
        ).toEqual([`${ALLOWED}:${ports[i]} not_through_proxy`]);
        // Its container had a link-layer address of its lease's, not the engine's (made from its IPv4 address).
        const mac = (await readFile(join(outcome.cwd, 'mac'), 'utf8')).trim();
        const ip = /inet (\d+)\.(\d+)\.(\d+)\.(\d+)/.exec(await readFile(join(outcome.cwd, 'ip'), 'utf8'));
        const engines = `02:42:${(ip?.slice(1) ?? []).map((n) => Number(n).toString(16).padStart(2, '0')).join(':')}`;
        expect(mac).toMatch(/^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/);
        expect(mac).not.toBe(engines);
        macs.add(mac);
      }
      expect(macs.size).toBe(ports.length);
    });

    it('the proxy crashing fails closed: the pair reaches nothing, through the proxy or around it', async () => {
      const jobId = `eg42-crash-${tag}`;
      const cwd = join(work, jobId, 'cwd');
      const running = pair(
        jobId,
        [
          HELPERS,
          'touch started; for i in $(seq 1 300); do [ -e go ] && break; sleep 0.2; done',
          `req after-crash "GET http://allowed.test/" allowed.test`,
          `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 6 nc -w 3 ${ALLOWED} 80 > out-raw 2>&1`,
          'true',
        ].join('\n'),
        POLICY,
      );
      for (
        let i = 0;
        !(await readFile(join(cwd, 'started')).then(
          () => true,
          () => false,
        ));
        i++
      ) {
        if (i > 600) throw new Error('the pair did not start');
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      await writeFile(stopFlag, '');
      const pids = (await proxyPids()).filter(isAlive);
      expect(pids.length).toBe(1);
      for (const pid of pids) process.kill(pid, 'SIGKILL');
      for (let i = 0; pids.some(isAlive); i++) {
        if (i > 100) throw new Error('the proxy did not die');
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const before = (await readFile(upstreamLog, 'utf8')).split('\n').length;
      await writeFile(join(cwd, 'go'), '');
      const { result } = await running;
      expect((await out(cwd, 'after-crash')).toString()).not.toContain('upstream');
      expect((await out(cwd, 'raw')).toString()).not.toContain('upstream');
      expect((await readFile(upstreamLog, 'utf8')).split('\n').length, 'nothing reached the internet').toBe(
        before,
      );
      expect(result.cleanup).toMatchObject({ removed: true, verified_absent: true });
      await rm(stopFlag, { force: true });
    });
  },
);
