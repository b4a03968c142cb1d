//go:build !unix

package diskbuf

import "io/fs"

// fileUsage is what a file takes: its size.
func fileUsage(fi fs.FileInfo) int64 { return fi.Size() }
