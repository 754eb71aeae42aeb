// Package e2e holds tests that drive the real tilectl binary as an
// operator or a script would: through a pseudo-terminal, with signals,
// against providers that are wrong, and across a SIGKILL. It has no
// production code; the tests build cmd/tilectl once per test binary.
package e2e
