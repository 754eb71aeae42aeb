// Package fdr is the flight data recorder: an append-only log of notable
// events (give-ups above all) kept in a fixed-size, file-backed ring.
//
// It promises: the file never grows past the capacity fixed at creation;
// when full, the oldest records are overwritten; every record carries a
// sequence number and a CRC32C, so a reader returns records oldest to
// newest, skips a torn or corrupt record instead of failing, and reports
// the gaps; appends from many goroutines and many processes interleave
// safely (a mutex, and flock on the file); a Durable append is on disk
// before it returns; and a keyed append writes at most one record per key
// while that record is in the ring, across processes and restarts.
//
// The file format is described in FORMAT.md.
package fdr
