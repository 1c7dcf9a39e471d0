// Writes docs/openapi.json from the zod schemas of `serve` (run after `npm run build`; a unit test keeps them equal).
import { readFileSync, writeFileSync } from 'node:fs';
import { openApiDocument } from '../dist/app/serve/openapi.js';

const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
writeFileSync(
  new URL('../docs/openapi.json', import.meta.url),
  `${JSON.stringify(openApiDocument(pkg.version), null, 2)}\n`,
);
