package tilestore

// PendingUploadsSQL lets the tests EXPLAIN the real query.
const PendingUploadsSQL = pendingUploadsSQL
