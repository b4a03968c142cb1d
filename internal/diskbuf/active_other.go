//go:build !linux

package diskbuf

func openActive(path string, _ int64, _ bool, header []byte) (active, error) {
	return openFileActive(path, header)
}
