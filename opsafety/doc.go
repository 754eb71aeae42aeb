// Package opsafety holds end-to-end tests of an operator's own mistakes
// and their repair from the command line: the real tilectl binary against
// a real Postgres and the reference provider over loopback HTTP. A wrong
// cache dir or a damaged blob never spends a tile's provider budget, and
// every recovery is a tilectl command, never SQL. It has no code of its
// own.
package opsafety
