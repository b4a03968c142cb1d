// Package rusage reads the CPU time and peak RSS of the calling process
// (getrusage RUSAGE_SELF).
package rusage

import (
	"syscall"
	"time"
)

// Usage is a snapshot of the process's resource usage.
type Usage struct {
	User, Sys time.Duration
	MaxRSSKB  int64 // peak resident set size in KiB (Linux ru_maxrss)
}

// CPU is user + system time.
func (u Usage) CPU() time.Duration { return u.User + u.Sys }

// Self returns the usage of the calling process (all threads).
func Self() Usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return Usage{}
	}
	return Usage{
		User:     time.Duration(ru.Utime.Nano()),
		Sys:      time.Duration(ru.Stime.Nano()),
		MaxRSSKB: int64(ru.Maxrss),
	}
}
