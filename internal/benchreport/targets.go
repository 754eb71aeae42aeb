package benchreport

// Targets are the performance promises of the issues, in the order the
// README's Performance table lists them. Bench names must match the
// benchmarks in the packages; a renamed benchmark shows as "not measured".
var Targets = []Target{
	// #2 foundations: tile store against local Postgres.
	{Issue: "#2", What: "IncrementUploadAttempts p99", Bench: "BenchmarkIncrementUploadAttempts/one", Metric: "p99-ms", Unit: "ms", AtMost: 5},
	{Issue: "#2", What: "IncrementUploadAttemptsMany, 1,000 tiles", Bench: "BenchmarkIncrementUploadAttemptsMany1000/1000", Metric: "ns/op", Scale: 1e-6, Unit: "ms", AtMost: 20},
	{Issue: "#2", What: "PendingUploads first page of 1M-tile flight", Bench: "BenchmarkPendingUploadsFirstPage/limit=256", Metric: "ns/op", Scale: 1e-6, Unit: "ms", AtMost: 10},
	{Issue: "#2", What: "`tiles import` of 10,000 tiles (scan, copy, insert)", Bench: "BenchmarkImport10k", Metric: "ns/op", Scale: 1e-9, Unit: "s", AtMost: 10},
	{Issue: "#2", What: "InsertTiles of 10,000 rows (COPY)", Bench: "BenchmarkInsertTiles10k/10k", Metric: "ns/op", Scale: 1e-9, Unit: "s", AtMost: 10},
	// #3 operation core.
	{Issue: "#3", What: "in-memory admit+seal", Bench: "BenchmarkMemoryAdmitSeal", Metric: "ops/s", Unit: "ops/s", AtLeast: 1_000_000},
	{Issue: "#3", What: "replay of a sealed outcome (allocs)", Bench: "BenchmarkMemoryReplay", Metric: "allocs/op", Unit: "allocs/op"},
	{Issue: "#3", What: "Postgres admit+seal, 8 clients (durable)", Bench: "BenchmarkPGAdmitSeal", Metric: "ops/s", Unit: "ops/s", AtLeast: 4000},
	{Issue: "#3", What: "  same run: single-row commits/s (ceiling = half)", Bench: "BenchmarkPGBaselineCommit", Metric: "commits/s", Unit: "commits/s"},
	{Issue: "#3", What: "  Postgres admit+seal, volatile idem (relaxed)", Bench: "BenchmarkPGAdmitSealRelaxed", Metric: "ops/s", Unit: "ops/s"},
	// #4 uploader end to end against the reference provider.
	{Issue: "#4", What: "end-to-end throughput, 0% faults", Bench: "BenchmarkEndToEnd/tilectl", Metric: "MB/s", Unit: "MB/s", AtLeast: 0.8, Baseline: "BenchmarkEndToEnd/baseline"},
	{Issue: "#4", What: "end-to-end throughput, 20% faults", Bench: "BenchmarkEndToEndFaults20/tilectl", Metric: "MB/s", Unit: "MB/s", AtLeast: 0.8, Baseline: "BenchmarkEndToEndFaults20/baseline"},
	{Issue: "#4", What: "uploader peak RSS, 100,000 tiles", Bench: "BenchmarkPeakRSS100k", Metric: "MB-peak", Unit: "MB", AtMost: 150},
	// #5 decorator and FDR.
	{Issue: "#5", What: "decorator overhead, success path (in-memory store)", Bench: "BenchmarkDecoratorSuccessOverhead", Metric: "ns/op", Scale: 1e-3, Unit: "µs", AtMost: 5000},
	{Issue: "#5", What: "decorator overhead, success path (Postgres store)", Bench: "BenchmarkDecoratorSuccessOverheadPostgres", Metric: "ns/op", Scale: 1e-3, Unit: "µs", AtMost: 5000},
	{Issue: "#5", What: "FDR append, buffered", Bench: "BenchmarkAppend", Metric: "records/s", Unit: "rec/s", AtLeast: 200_000},
	{Issue: "#5", What: "FDR append, durable (fdatasync)", Bench: "BenchmarkAppendDurable", Metric: "records/s", Unit: "rec/s"},
}
