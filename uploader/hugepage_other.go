//go:build !linux

package uploader

// adviseHugePages does nothing where transparent huge pages cannot be
// asked for.
func adviseHugePages([]byte) {}
