package main

import (
	"math"
	"slices"
	"time"
)

// latencies is a set of measured durations.
type latencies []time.Duration

// percentile returns the p-th percentile (0 < p ≤ 100) by the nearest-rank
// method: the smallest sample with at least p% of the samples at or below
// it. Nearest rank never invents a value between two samples, which keeps
// p99 of a small run honest (it is the worst sample, not an interpolation).
func (l latencies) percentile(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// ms converts a duration to fractional milliseconds, the unit of the table.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
