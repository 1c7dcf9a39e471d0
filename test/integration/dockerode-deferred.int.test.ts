import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli, node } from '../support/cli.js';
import { DRIVER_IMAGE, noDocker } from '../support/docker.js';
import { loadedFiles, LOADED_RECORD_VARIABLE, writeLoadRecorder } from '../support/loaded-files.js';

/**
 * dockerode loaded without gRPC, its proto loader and ssh2 (src/adapters/docker/dockerode.ts, issue 26 start-up), and
 * without debug while DEBUG is unset (issue 39): a whole `pair run` never loads them, and the transports that need them still work on first use, each loading its
 * module then: an `ssh://` engine (ssh2's own connection error) and a BuildKit session (gRPC, against the real engine).
 */
const exec = promisify(execFile);
const DEFERRED =
  /\/node_modules\/(@grpc|ssh2|protobufjs|tar-fs|debug|supports-color|dockerode\/node_modules\/tar-stream|readable-stream)\/|\/docker-modem\/lib\/http_duplex\.js$/;
let work: string;

describe.skipIf(noDocker)('dockerode without its unused transports', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-dockerode-deferred-'));
  });
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it('a whole pair run loads dockerode but never gRPC, protobufjs, ssh2, tar-fs, readable-stream or debug', async () => {
    const hook = await writeLoadRecorder(work);
    const record = join(work, 'loaded.txt');
    await mkdir(join(work, 'cwd'), { recursive: true });
    const spec = join(work, 'spec.json');
    await writeFile(
      spec,
      JSON.stringify({
        job_id: 'deferred-1',
        argv: ['/opt/driver/run', 'outcome=completed'],
        cwd: join(work, 'cwd'),
        outcome_path: join(work, 'out', 'outcome.json'),
        timeout_seconds: 60,
        image: DRIVER_IMAGE,
      }),
    );
    const run = await cli(
      [
        'pair',
        'run',
        '--spec',
        spec,
        '--output',
        join(work, 'evidence'),
        '--registry',
        join(work, 'registry.db'),
      ],
      { nodeArgs: ['--import', hook], env: { [LOADED_RECORD_VARIABLE]: record, DEBUG: undefined } },
    );
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('pair deferred-1: completed');
    const loaded = await loadedFiles(record);
    expect(loaded.some((url) => url.includes('/node_modules/dockerode/lib/docker.js'))).toBe(true);
    expect(loaded.filter((url) => DEFERRED.test(url))).toEqual([]);
  });

  it('loaded beside a static import of dockerode (linked first, run after us), it is dockerode itself', async () => {
    // The ESM loader puts dockerode in require.cache, not yet loaded, while it links the second import; our module
    // runs first and must not take that empty entry for dockerode (it did: `Dockerode` was {}).
    const script = join(work, 'beside.mjs');
    const ours = pathToFileURL(resolve('dist/adapters/docker/dockerode.js')).href;
    const theirs = pathToFileURL(resolve('node_modules/dockerode/lib/docker.js')).href;
    await writeFile(
      script,
      [
        `import { Dockerode } from ${JSON.stringify(ours)};`,
        `import Docker from ${JSON.stringify(theirs)};`,
        'process.stdout.write(JSON.stringify({ type: typeof Dockerode, same: Dockerode === Docker, ping: String(await new Dockerode().ping()) }));',
      ].join('\n'),
    );
    const run = await node([script]);
    expect(run.code, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({ type: 'function', same: true, ping: 'OK' });
  });

  it('with DEBUG naming docker-modem, its logger is the real debug: a request is logged', async () => {
    const script = join(work, 'debug.mjs');
    const dockerode = pathToFileURL(resolve('dist/adapters/docker/dockerode.js')).href;
    await writeFile(
      script,
      [
        `const { Dockerode } = await import(${JSON.stringify(dockerode)});`,
        'process.stdout.write(String(await new Dockerode().ping()));',
      ].join('\n'),
    );
    const logged = await node([script], { env: { DEBUG: 'modem', DEBUG_COLORS: 'no' } });
    expect(logged.code, logged.stderr).toBe(0);
    expect(logged.stdout).toBe('OK');
    expect(logged.stderr).toMatch(/modem Sending: .*_ping/s);
    const quiet = await node([script], { env: { DEBUG: undefined } });
    expect(quiet.code, quiet.stderr).toBe(0);
    expect(quiet.stdout).toBe('OK');
    expect(quiet.stderr).toBe('');
  });

  it("a TLS engine (https://) loads Node's https on first use, and works", async () => {
    const tls = await exec('openssl', [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-days',
      '1',
      '-subj',
      '/CN=localhost',
      '-addext',
      'subjectAltName=IP:127.0.0.1',
      '-keyout',
      join(work, 'key.pem'),
      '-out',
      join(work, 'cert.pem'),
    ]).then(
      () => null,
      (err: Error) => err.message,
    );
    expect(tls).toBeNull();
    const script = join(work, 'tls.mjs');
    const dockerode = pathToFileURL(resolve('dist/adapters/docker/dockerode.js')).href;
    await writeFile(
      script,
      [
        "import { readFileSync } from 'node:fs';",
        `const { Dockerode } = await import(${JSON.stringify(dockerode)});`,
        "const loaded = () => process.moduleLoadList.includes('NativeModule https');",
        'const facts = { atLoad: loaded(), ping: String(await new Dockerode().ping()), afterUnixPing: loaded() };',
        // An engine's answer to a ping, over TLS on the loopback (a server of this script's: https is loaded from here on).
        "const key = readFileSync(process.argv[2] + '/key.pem'), cert = readFileSync(process.argv[2] + '/cert.pem');",
        "const https = await import('node:https');",
        "const server = https.createServer({ key, cert }, (req, res) => res.end(req.url.endsWith('/_ping') ? 'OK' : 'no'));",
        "await new Promise((r) => server.listen(0, '127.0.0.1', r));",
        "const engine = new Dockerode({ protocol: 'https', host: '127.0.0.1', port: server.address().port, ca: cert });",
        'facts.tlsPing = String(await engine.ping());',
        'server.close();',
        'process.stdout.write(JSON.stringify(facts));',
        'process.exit(0);',
      ].join('\n'),
    );
    const run = await node([script, work]);
    expect(run.code, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({
      atLoad: false,
      ping: 'OK',
      afterUnixPing: false,
      tlsPing: 'OK',
    });
  });

  it('an exec with stdin (written, its output read back) loads the duplex and readable-stream on first use, and works', async () => {
    const script = join(work, 'stdin.mjs');
    const dockerode = pathToFileURL(resolve('dist/adapters/docker/dockerode.js')).href;
    await writeFile(
      script,
      [
        "import { createRequire } from 'node:module';",
        `const { Dockerode } = await import(${JSON.stringify(dockerode)});`,
        'const cache = createRequire(import.meta.url).cache;',
        "const loaded = () => Object.keys(cache).some((f) => f.includes('/node_modules/readable-stream/'));",
        'const docker = new Dockerode();',
        `const container = await docker.createContainer({ Image: ${JSON.stringify(DRIVER_IMAGE)}, Entrypoint: ['sleep'], Cmd: ['30'], Labels: { 'it.dockerode-deferred': 'stdin' }, HostConfig: { NetworkMode: 'none' } });`,
        'const facts = { atLoad: loaded() };',
        'try {',
        '  await container.start();',
        "  const exec = await container.exec({ Cmd: ['cat'], AttachStdin: true, AttachStdout: true, AttachStderr: true });",
        // Without hijack, docker-modem wraps the request and its response in its HttpDuplex (a hijack is the socket).
        '  const socket = await exec.start({ stdin: true });',
        "  let out = '';",
        '  const echoed = new Promise((r) => {',
        "    socket.on('data', (chunk) => { out += chunk.toString('latin1'); if (out.includes('through the duplex')) r(true); });",
        "    socket.on('close', () => r(false));",
        '    setTimeout(() => r(false), 10_000).unref();',
        '  });',
        "  socket.write('through the duplex');",
        '  await echoed;',
        "  facts.echoed = out.includes('through the duplex');",
        '  facts.duplex = socket.constructor.name;',
        '  facts.afterExec = loaded();',
        '} finally {',
        '  await container.remove({ force: true });',
        '}',
        'process.stdout.write(JSON.stringify(facts));',
        'process.exit(0);',
      ].join('\n'),
    );
    const run = await node([script]);
    expect(run.code, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({
      atLoad: false,
      echoed: true,
      duplex: 'HttpDuplex',
      afterExec: true,
    });
  });

  it('an ssh:// engine and a BuildKit session load their modules on first use, and work', async () => {
    const script = join(work, 'transports.mjs');
    const dockerode = pathToFileURL(resolve('dist/adapters/docker/dockerode.js')).href;
    await writeFile(
      script,
      [
        "import { createRequire } from 'node:module';",
        "import { Readable } from 'node:stream';",
        `const { Dockerode } = await import(${JSON.stringify(dockerode)});`,
        'const cache = createRequire(import.meta.url).cache;',
        'const loaded = (name) => Object.keys(cache).some((f) => f.includes(`/node_modules/${name}/`));',
        'const facts = { atLoad: { grpc: loaded("@grpc/grpc-js"), ssh2: loaded("ssh2") } };',
        'facts.ping = String(await new Dockerode().ping());',
        // port 1 on the loopback: nothing listens, so ssh2's own connect fails
        'try { await new Dockerode({ protocol: "ssh", host: "127.0.0.1", port: 1, username: "nobody" }).ping(); facts.ssh = "answered"; }',
        'catch (err) { facts.ssh = err.code ?? err.message; }',
        'facts.afterSsh = { grpc: loaded("@grpc/grpc-js"), ssh2: loaded("ssh2") };',
        // a build context with no Dockerfile: the session opens (BuildKit traces), then the build fails; no image
        'const build = await new Dockerode().buildImage(Readable.from([Buffer.alloc(1024)]), { version: "2", t: "roboguide/never-built:1" });',
        'let out = ""; for await (const chunk of build) out += chunk;',
        'facts.buildkit = out.includes("moby.buildkit.trace");',
        'facts.afterBuild = { grpc: loaded("@grpc/grpc-js"), protoLoader: loaded("@grpc/proto-loader") };',
        'process.stdout.write(JSON.stringify(facts));',
        'process.exit(0);',
      ].join('\n'),
    );
    const run = await node(['--no-deprecation', script]);
    expect(run.code, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({
      atLoad: { grpc: false, ssh2: false },
      ping: 'OK',
      ssh: 'ECONNREFUSED',
      afterSsh: { grpc: false, ssh2: true },
      buildkit: true,
      afterBuild: { grpc: true, protoLoader: true },
    });
  });
});
