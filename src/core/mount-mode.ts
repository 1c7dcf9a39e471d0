/**
 * How a pair's or a session's bind sources reach the engine (docs/spec.md 5.3):
 * - `staged`: each source is opened from `/` one component at a time without following a link, checked on what was
 *   opened, and that opened folder is bind-mounted onto a staging point of ours; the engine gets the staging point,
 *   which names the checked folder whatever happens to the source's path afterwards.
 * - `walked`: the host refused the bind (no privilege, rootless engine): the source is walked with lstat and the
 *   engine gets the link-free path, verified again after the create and the start (a detector, not a wall).
 */
export type MountMode = 'staged' | 'walked';
