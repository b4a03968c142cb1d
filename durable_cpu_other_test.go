//go:build !linux

package analytics

import "time"

func threadCPU() time.Duration { return 0 } // not measured here

func realNow() time.Duration { return 0 } // not measured here
