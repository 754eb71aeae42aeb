//go:build !linux

package tilestore

// readExactlyAt has no fast path here: BlobStore.ReadExactly always
// returns false and the caller opens the blob with Open.
func readExactlyAt(int, string, []byte) bool { return false }
