//go:build race

package diskbuf

const raceEnabled = true
