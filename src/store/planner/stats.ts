/** The counts a planned query keeps of where its buckets came from. */
/** What one query did (tests and the benchmark look at it). */
export interface PlanStats {
  rollupBuckets: number;
  rawPoints: number;
  rawPieces: number;
  /** raw pieces answered as a finest-tier bucket minus the raw points of the rest of it */
  subtractedPieces: number;
  /** raw pieces in dirty windows summed from the fragments' columns, without merging the window */
  plainDirtyPieces: number;
  /** request buckets answered by moving their boundaries to tier anchors (SeriesReader.byBoundaries) */
  boundaryBuckets: number;
}

export const noStats = (): PlanStats => ({
  rollupBuckets: 0,
  rawPoints: 0,
  rawPieces: 0,
  subtractedPieces: 0,
  plainDirtyPieces: 0,
  boundaryBuckets: 0,
});
