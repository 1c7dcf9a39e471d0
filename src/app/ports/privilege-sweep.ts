/**
 * The second line against host privilege (docs/secrets.md "host privilege"): after a pair, every regular file under
 * its host folders that carries S_ISUID or S_ISGID loses those bits. Our seccomp profile already refuses every call
 * that could set them from inside the container; a file found here came through a bypass or from the host.
 */
export interface PrivilegeSweep {
  /** Strips the bits below these folders (never following a link, never leaving their file systems); the paths stripped. */
  strip(folders: readonly string[]): Promise<PrivilegeSweepReport>;
}

export interface PrivilegeSweepReport {
  /** Host paths of the files whose setuid/setgid bits were cleared, in walk order. */
  readonly stripped: readonly string[];
  /** False when the walk stopped at its entry bound: files past it were not looked at. */
  readonly complete: boolean;
}
