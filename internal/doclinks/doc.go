// Package doclinks holds only a test: every relative link in the
// repository's Markdown (README, docs/, SECURITY, BENCHMARKS, PROTOCOL,
// the component READMEs) names a file that exists and, with a #fragment,
// a heading of it. The docs moved once (the README's reference became
// docs/); this keeps them linked as they move again.
package doclinks
