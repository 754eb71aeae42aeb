package tilestore

// PendingUploadsSQL lets the tests EXPLAIN the real query.
const PendingUploadsSQL = pendingUploadsSQL

// ClaimMarkSQL lets the tests EXPLAIN the real claim in order o.
func ClaimMarkSQL(o Order) string { return claimMarkSQL[o] }

// ClaimTxBegin is what a claim's transaction begins with.
var ClaimTxBegin = claimTx.BeginQuery

// UncountedExistSQL lets the tests EXPLAIN the look for uncounted
// rejections.
const UncountedExistSQL = uncountedExistSQL

// AtBudgetSQL lets the tests EXPLAIN the look for tiles at their budget.
const AtBudgetSQL = atBudgetSQL
