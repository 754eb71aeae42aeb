package uploader

// Fingerprint is fingerprint, for tests that journal a batch by hand.
var Fingerprint = fingerprint
