// Package security holds end-to-end checks of tilectl's security promises,
// run against the built binaries: the provider token never leaks, TLS
// certificates are verified unless the user opts out, a hostile provider
// cannot exhaust memory or outlast --deadline, hostile flight and tile IDs
// are refused or handled safely, and local files are owner-only.
//
// The package has no code of its own; its tests are the product.
package security
