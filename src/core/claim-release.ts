// When a reservation may be released outside terminal reconciliation (docs/claimed-pair-design.md): only when no
// container was ever created for its claim. Pure: the caller (src/app/pair/claim.ts) gathers the facts.

/** What is known of a claim whose pair failed before it ran (or whose receipt was never published). */
export interface UnstartedClaimFacts {
  /** The receipt's `container_id` (set once the engine created the container); null: none recorded. */
  readonly containerId: string | null;
  /** Containers the engine lists with the claim's label; null: not known (the engine could not be asked). */
  readonly labelled: number | null;
  /** Whether this claim's receipt is on disk: a claim that stands is finished by whoever owns it. */
  readonly receipt: 'published' | 'absent';
  /**
   * Whether a published claim is finished later through terminal reconciliation by its owner (a batch's resume
   * rebuilds its result and reconciles it). `pair run` ends with its process: nobody would.
   */
  readonly resumeFinishesClaim: boolean;
}

export type UnstartedClaimDecision =
  | { readonly kind: 'release' }
  | { readonly kind: 'keep'; readonly why: 'container_exists' | 'container_unknown' | 'resume_finishes' };

/**
 * Release the slot now only when no container was ever created for the claim (none on the receipt, none with its
 * label); a claim left standing for resume keeps its slot so that resume's reconciliation can release it once.
 */
export function unstartedClaimDecision(facts: UnstartedClaimFacts): UnstartedClaimDecision {
  if (facts.containerId !== null || (facts.labelled ?? 0) > 0)
    return { kind: 'keep', why: 'container_exists' };
  if (facts.labelled === null) return { kind: 'keep', why: 'container_unknown' };
  if (facts.receipt === 'published' && facts.resumeFinishesClaim)
    return { kind: 'keep', why: 'resume_finishes' };
  return { kind: 'release' };
}
