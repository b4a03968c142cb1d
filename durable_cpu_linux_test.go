package analytics

import (
	"syscall"
	"time"
)

// threadCPU is the CPU time of the calling thread (the caller locks its
// goroutine to it), so a benchmark can count its own work and not the
// time it waited for a core.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// realNow is the wall clock, also inside a synctest bubble (whose time
// package clock stands still while goroutines run).
func realNow() time.Duration {
	var tv syscall.Timeval
	_ = syscall.Gettimeofday(&tv)
	return time.Duration(tv.Nano())
}
