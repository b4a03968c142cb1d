//go:build race

package analytics

// raceEnabled: the race detector makes sync.Pool drop objects at random,
// so allocation counts are not meaningful under it.
const raceEnabled = true
