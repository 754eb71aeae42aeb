package tilestore

// PendingUploadsSQL lets the tests EXPLAIN the real query.
const PendingUploadsSQL = pendingUploadsSQL

// FlightOverviewSQL lets the tests EXPLAIN the real query.
const FlightOverviewSQL = flightOverviewSQL
