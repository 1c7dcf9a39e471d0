/**
 * Heuristics that keep secrets out of manifests (SPEC §3): secret-looking environment names
 * must reference the supervisor's environment, and credential-like files must not be hashed
 * into `source_sha256` (their digests would be persisted as evidence).
 */
const SECRET_NAME = /KEY|TOKEN|SECRET|PASS|PWD|CREDENTIAL|AUTH|COOKIE|PRIVATE|SESSION|DSN/i;

/**
 * Well-known variables that match SECRET_NAME by accident and never hold a secret: the shell's working directories,
 * the desktop session's bookkeeping. Matched exactly (case-sensitive, as the shell sets them).
 */
const NOT_SECRET_NAMES: ReadonlySet<string> = new Set([
  'PWD',
  'OLDPWD',
  'XDG_SESSION_ID',
  'XDG_SESSION_TYPE',
  'XDG_SESSION_CLASS',
  'XDG_SESSION_DESKTOP',
  'DBUS_SESSION_BUS_ADDRESS',
  'SESSION_MANAGER',
]);
/** Words that contain a keyword of SECRET_NAME without meaning one (GIT_AUTHOR_NAME, KEYBOARD_LAYOUT). */
const INNOCENT_WORDS = /AUTHOR(?!I[SZ])|KEYBOARD|KEYMAP/gi;

export function isSecretLookingName(name: string): boolean {
  if (NOT_SECRET_NAMES.has(name)) return false;
  return SECRET_NAME.test(name.replace(INNOCENT_WORDS, ''));
}

const URL_NAME = /(?:^|_)URL$/i;
/** `scheme://user:password@…`: a URL that carries a password in its userinfo. */
const URL_WITH_PASSWORD = /^[a-z][a-z0-9+.-]*:\/\/[^/?#@\s]*:[^/?#@\s]*@/i;

/** A `*_URL` variable whose literal value holds `user:password@`. */
export function isUrlWithPassword(name: string, value: string): boolean {
  return URL_NAME.test(name) && URL_WITH_PASSWORD.test(value);
}

/**
 * Resolved values shorter than this are refused unless the user allows them: masking every
 * occurrence of a few common characters would wreck the logs, and not masking them leaks them.
 */
export const MIN_SECRET_VALUE_LENGTH = 8;

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
