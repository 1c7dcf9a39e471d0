// Run by test/e2e/consumer-kit.e2e.test.ts in the consumer project and SIGKILLed halfway: it starts a pair
// container and a server with a session, says so in $HALFWAY_FILE, then waits to be killed.
import { writeFile } from 'node:fs/promises';
import { it } from 'vitest';
import { PairDriverContainer, RoboguideServer } from 'roboguide-eval/testing';

it('starts what a killed suite leaves behind, then waits to be killed', async () => {
  const pair = await new PairDriverContainer().withHang().withLabels({ suite: 'consumer-killed' }).start();
  const server = await new RoboguideServer().start();
  const { body } = await server.client.call<{ session_id: string }>('POST', '/v1/sessions', {
    body: { image: 'roboguide/pair-driver:1', labels: { suite: 'consumer-killed' } },
  });
  await writeFile(
    process.env['HALFWAY_FILE'] ?? 'halfway.json',
    JSON.stringify({
      pair: pair.getId(),
      session: body.session_id,
      workDir: server.workDir,
      serverPid: server.process.pid,
    }),
  );
  await new Promise(() => undefined);
}, 600_000);
