/**
 * Heuristics that keep secrets out of manifests (SPEC §3): secret-looking environment names
 * must reference the supervisor's environment, and credential-like files must not be hashed
 * into `source_sha256` (their digests would be persisted as evidence).
 */
const SECRET_NAME = /KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE/i;

export function isSecretLookingName(name: string): boolean {
  return SECRET_NAME.test(name);
}

const CREDENTIAL_BASENAMES = new Set(['.env', 'auth.json', '.netrc', '.npmrc', '.pypirc']);

/** By basename, case-insensitive: `.env`, `.env.*`, `*.pem`, `*.key`, `id_rsa*`, `*credentials*`, … */
export function isCredentialLikePath(path: string): boolean {
  const base = basename(path).toLowerCase();
  return (
    CREDENTIAL_BASENAMES.has(base) ||
    base.startsWith('.env.') ||
    base.endsWith('.pem') ||
    base.endsWith('.key') ||
    base.startsWith('id_rsa') ||
    base.includes('credentials')
  );
}

function basename(path: string): string {
  const parts = path.split('/').filter((p) => p !== '');
  return parts.at(-1) ?? '';
}
