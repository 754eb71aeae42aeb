package benchreport

// Targets are the performance promises of the issues, in the order the
// README's Performance table lists them. Bench names must match the
// benchmarks in the packages; a renamed benchmark shows as "not measured".
var Targets = []Target{
	// #2 foundations: tile store against local Postgres.
	// upload_attempts rises in one place, CountRejectionsUpTo: one tile's
	// rejection counted, and 1,000 tiles' in one count.
	{Issue: "#2", What: "a rejection raises its tile's upload_attempts (CountRejectionsUpTo) p99", Bench: "BenchmarkCountRejectionsOneTile/one", Metric: "p99-ms", Unit: "ms", AtMost: 5},
	{Issue: "#2", What: "rejections raise 1,000 tiles' upload_attempts in one CountRejectionsUpTo", Bench: "BenchmarkCountRejections1000Tiles/1000", Metric: "ns/op", Scale: 1e-6, Unit: "ms", AtMost: 20},
	{Issue: "#2", What: "PendingUploads first page of 1M-tile flight", Bench: "BenchmarkPendingUploadsFirstPage/limit=256", Metric: "ns/op", Scale: 1e-6, Unit: "ms", AtMost: 10},
	{Issue: "#2", What: "`tiles import` of 10,000 tiles (scan, copy, insert)", Bench: "BenchmarkImport10k", Metric: "ns/op", Scale: 1e-9, Unit: "s", AtMost: 10},
	{Issue: "#2", What: "InsertTiles of 10,000 rows (COPY)", Bench: "BenchmarkInsertTiles10k/10k", Metric: "ns/op", Scale: 1e-9, Unit: "s", AtMost: 10},
	// #3 operation core.
	{Issue: "#3", What: "in-memory admit+seal", Bench: "BenchmarkMemoryAdmitSeal", Metric: "ops/s", Unit: "ops/s", AtLeast: 1_000_000},
	{Issue: "#3", What: "replay of a sealed outcome (allocs)", Bench: "BenchmarkMemoryReplay", Metric: "allocs/op", Unit: "allocs/op"},
	{Issue: "#3", What: "Postgres admit+seal, 8 clients (durable)", Bench: "BenchmarkPGAdmitSeal", Metric: "ops/s", Unit: "ops/s", AtLeast: 4000},
	{Issue: "#3", What: "  same run: single-row commits/s (ceiling = half)", Bench: "BenchmarkPGBaselineCommit", Metric: "commits/s", Unit: "commits/s"},
	// #4 uploader end to end against the reference provider.
	{Issue: "#4", What: "end-to-end throughput, 0% faults", Bench: "BenchmarkEndToEnd/tilectl", Metric: "MB/s", Unit: "MB/s", AtLeast: 0.8, Baseline: "BenchmarkEndToEnd/baseline"},
	{Issue: "#4", What: "end-to-end throughput, 20% faults", Bench: "BenchmarkEndToEndFaults20/tilectl", Metric: "MB/s", Unit: "MB/s", AtLeast: 0.8, Baseline: "BenchmarkEndToEndFaults20/baseline"},
	{Issue: "#4", What: "uploader peak RSS, 100,000 tiles", Bench: "BenchmarkPeakRSS100k", Metric: "MB-peak", Unit: "MB", AtMost: 100},
	// #5 decorator and FDR.
	{Issue: "#5", What: "decorator overhead, success path (in-memory store)", Bench: "BenchmarkDecoratorSuccessOverhead", Metric: "ns/op", Scale: 1e-3, Unit: "µs", AtMost: 5000},
	{Issue: "#5", What: "decorator overhead, success path (Postgres store)", Bench: "BenchmarkDecoratorSuccessOverheadPostgres", Metric: "ns/op", Scale: 1e-3, Unit: "µs", AtMost: 5000},
	{Issue: "#5", What: "FDR append, buffered", Bench: "BenchmarkAppend", Metric: "records/s", Unit: "rec/s", AtLeast: 200_000},
	{Issue: "#5", What: "FDR append, durable (fdatasync)", Bench: "BenchmarkAppendDurable", Metric: "records/s", Unit: "rec/s"},
	// #11 the client's cost per tile: upload-pending (lock, decorator, HTTP
	// uploader, Postgres journal) against the minimal client, alternated in
	// one run, both against the in-memory sink (providertest.Sink).
	{Issue: "#11", What: "upload-pending vs minimal client, 10,000 x ~1 KiB (in-memory sink)", Bench: "BenchmarkUploadPendingVsBaseline/1KiB", Metric: "tilectl-tiles/s", BaselineMetric: "baseline-tiles/s", Unit: "tiles/s", AtLeast: 0.7},
	{Issue: "#11", What: "  same run: postgres CPU per tile during the upload-pending run (the journal's share)", Bench: "BenchmarkUploadPendingVsBaseline/1KiB", Metric: "tilectl-pg-cpu-us/tile", Unit: "µs/tile"},
	{Issue: "#11", What: "  same run: this process's CPU per tile (the side and the sink), vs the minimal client's run", Bench: "BenchmarkUploadPendingVsBaseline/1KiB", Metric: "tilectl-cpu-us/tile", BaselineMetric: "baseline-cpu-us/tile", Unit: "µs/tile"},
	{Issue: "#11", What: "upload-pending vs minimal client, 5,000 x ~16 KiB (in-memory sink)", Bench: "BenchmarkUploadPendingVsBaseline/16KiB", Metric: "tilectl-tiles/s", BaselineMetric: "baseline-tiles/s", Unit: "tiles/s", AtLeast: 0.9},
	{Issue: "#11", What: "upload-pending vs minimal client, 2,000 x ~64 KiB (in-memory sink)", Bench: "BenchmarkUploadPendingVsBaseline/64KiB", Metric: "tilectl-tiles/s", BaselineMetric: "baseline-tiles/s", Unit: "tiles/s", AtLeast: 0.9},
	{Issue: "#11", What: "upload-pending vs minimal client, 100,000 x ~1 KiB (in-memory sink)", Bench: "BenchmarkUploadPendingVsBaseline/1KiBx100k", Metric: "tilectl-tiles/s", BaselineMetric: "baseline-tiles/s", Unit: "tiles/s"},
	{Issue: "#11", What: "upload-pending per-tile time, 100,000 vs 10,000 tiles", Bench: "BenchmarkUploadPendingVsBaseline/1KiBx100k", Metric: "tilectl-us/tile", Baseline: "BenchmarkUploadPendingVsBaseline/1KiB", Unit: "µs/tile", AtMost: 1.1},
	{Issue: "#11", What: "  same run: minimal client per-tile time, 100,000 vs 10,000", Bench: "BenchmarkUploadPendingVsBaseline/1KiBx100k", Metric: "baseline-us/tile", Baseline: "BenchmarkUploadPendingVsBaseline/1KiB", Unit: "µs/tile"},
	{Issue: "#11", What: "upload-pending first batch on the wire, 1,000,000-tile flight", Bench: "BenchmarkUploadPendingFirstBatch1M", Metric: "first-batch-ms", Unit: "ms", AtMost: 200},
	// `tiles import`: the real binary, one process per import, its peak
	// RSS as the kernel counts it (BenchmarkImportProcess).
	{Issue: "#11", What: "`tiles import` of 10,000 x 16 KiB tiles (tilectl process)", Bench: "BenchmarkImportProcess/10k", Metric: "tiles/s", Unit: "tiles/s", AtLeast: 5000},
	{Issue: "#11", What: "  same run: a plain copy of the same files (create, write; no sync, no database)", Bench: "BenchmarkImportProcess/10k", Metric: "baseline-tiles/s", Unit: "tiles/s"},
	{Issue: "#11", What: "  same run: 100,000 x 16 KiB tiles, vs a plain copy of them", Bench: "BenchmarkImportProcess/100k", Metric: "tiles/s", BaselineMetric: "baseline-tiles/s", Unit: "tiles/s"},
	{Issue: "#11", What: "`tiles import` peak RSS, 10,000 x 16 KiB tiles", Bench: "BenchmarkImportProcess/10k", Metric: "MB-peak", Unit: "MB"},
	{Issue: "#11", What: "`tiles import` peak RSS, 100,000 vs 10,000 tiles (flat)", Bench: "BenchmarkImportProcess/100k", Metric: "MB-peak", Baseline: "BenchmarkImportProcess/10k", Unit: "MB", AtMost: 1.1},
	{Issue: "#11", What: "decorator success path (Postgres store)", Bench: "BenchmarkDecoratorSuccessOverheadPostgres", Metric: "ns/op", Scale: 1e-3, Unit: "µs", AtMost: 500},
	{Issue: "#11", What: "give-up counting per tile, 40,000 vs 10,000 give-ups (256-tile chunks)", Bench: "BenchmarkCountRejectionsChunked", Metric: "us/row-40k", BaselineMetric: "us/row-10k", Unit: "µs/tile", AtMost: 1.25},
	{Issue: "#11", What: "journal alone: claim + settle per tile, 4 workers, 256-tile batches, 10,000 tiles", Bench: "BenchmarkJournalPerTile", Metric: "us/tile", Unit: "µs/tile"},
	{Issue: "#11", What: "  same run: postgres CPU per tile", Bench: "BenchmarkJournalPerTile", Metric: "pg-cpu-us/tile", Unit: "µs/tile"},
	{Issue: "#11", What: "upload-pending allocations per tile, 10,000 x ~1 KiB (sink's included)", Bench: "BenchmarkUploadPendingVsBaseline/1KiB", Metric: "tilectl-allocs/tile", BaselineMetric: "baseline-allocs/tile", Unit: "allocs/tile"},
	// #12 scale-out: processes sharing a flight through one Postgres.
	{Issue: "#12", What: "1 upload-pending process, provider at 50 ms per batch", Bench: "BenchmarkScaleOut/procs=1", Metric: "tiles/s", Unit: "tiles/s"},
	{Issue: "#12", What: "  2 processes on one flight, vs 1", Bench: "BenchmarkScaleOut/procs=2", Metric: "tiles/s", Baseline: "BenchmarkScaleOut/procs=1", Unit: "tiles/s"},
	{Issue: "#12", What: "  4 processes on one flight, vs 1", Bench: "BenchmarkScaleOut/procs=4", Metric: "tiles/s", Baseline: "BenchmarkScaleOut/procs=1", Unit: "tiles/s"},
	{Issue: "#12", What: "claim + settle cycles, 8 runs on one flight (Postgres)", Bench: "BenchmarkClaimBatch", Metric: "claims/s", Unit: "claims/s"},
	// #21 the link: the real upload-pending process at default settings
	// through the link emulator (internal/linkemu: one shared bottleneck,
	// a rate each way, a propagation delay, a queue), 16 KiB tiles, the
	// in-memory sink with the profile's max_batch_tiles, against the
	// link's capacity (tile payload / (rate / 8)) and the best of a naive
	// client at 4, 16 and 64 in flight through the same link, in one run
	// (internal/linkbench). The naive client asks the capabilities first,
	// as the contract requires; a row shows it timed without that question.
	{Issue: "#21", What: "cellular link (30 Mbit/s, 50 ms RTT, 128-tile batches, 2,000 tiles): tilectl at defaults, share of capacity", Bench: "BenchmarkLink/cellular", Metric: "tilectl-share", Unit: "of capacity", AtLeast: 0.85},
	{Issue: "#21", What: "  same run: tilectl vs the best naive client", Bench: "BenchmarkLink/cellular", Metric: "tilectl-MB/s", BaselineMetric: "naive-MB/s", Unit: "MB/s", AtLeast: 0.95},
	{Issue: "#21", What: "  same run: the best naive client, share of capacity", Bench: "BenchmarkLink/cellular", Metric: "naive-best-share", Unit: "of capacity"},
	{Issue: "#21", What: "  same run: the best naive client from its first batch (told the limits, not asking), share of capacity", Bench: "BenchmarkLink/cellular", Metric: "naive-told-share", Unit: "of capacity"},
	{Issue: "#21", What: "  the link's bound for a client that asks the capabilities first (3 round trips + payload at the link's rate), share of capacity", Bench: "BenchmarkLink/cellular", Metric: "bound-share", Unit: "of capacity"},
	{Issue: "#21", What: "  same run: worst ETA error from 25% done on", Bench: "BenchmarkLink/cellular", Metric: "eta-error", Unit: "of remaining", AtMost: 0.2},
	{Issue: "#21", What: "satellite link (5 Mbit/s, 700 ms RTT, 16-tile batches, 300 tiles): tilectl at defaults, share of capacity", Bench: "BenchmarkLink/satellite", Metric: "tilectl-share", Unit: "of capacity", AtLeast: 0.85},
	{Issue: "#21", What: "  same run: tilectl vs the best naive client", Bench: "BenchmarkLink/satellite", Metric: "tilectl-MB/s", BaselineMetric: "naive-MB/s", Unit: "MB/s", AtLeast: 0.95},
	{Issue: "#21", What: "  same run: the best naive client, share of capacity", Bench: "BenchmarkLink/satellite", Metric: "naive-best-share", Unit: "of capacity"},
	{Issue: "#21", What: "  same run: the best naive client from its first batch (told the limits, not asking), share of capacity", Bench: "BenchmarkLink/satellite", Metric: "naive-told-share", Unit: "of capacity"},
	{Issue: "#21", What: "  the link's bound for a client that asks the capabilities first (3 round trips + payload at the link's rate), share of capacity", Bench: "BenchmarkLink/satellite", Metric: "bound-share", Unit: "of capacity"},
	{Issue: "#21", What: "  same run: worst ETA error from 25% done on", Bench: "BenchmarkLink/satellite", Metric: "eta-error", Unit: "of remaining", AtMost: 0.2},
	{Issue: "#21", What: "long fat link (200 Mbit/s, 150 ms RTT, 4-tile batches, 2,000 tiles): tilectl at defaults, share of capacity", Bench: "BenchmarkLink/longfat", Metric: "tilectl-share", Unit: "of capacity", AtLeast: 0.85},
	{Issue: "#21", What: "  same run: tilectl vs the best naive client", Bench: "BenchmarkLink/longfat", Metric: "tilectl-MB/s", BaselineMetric: "naive-MB/s", Unit: "MB/s", AtLeast: 0.95},
	{Issue: "#21", What: "  same run: the best naive client, share of capacity", Bench: "BenchmarkLink/longfat", Metric: "naive-best-share", Unit: "of capacity"},
	{Issue: "#21", What: "  same run: the best naive client from its first batch (told the limits, not asking), share of capacity", Bench: "BenchmarkLink/longfat", Metric: "naive-told-share", Unit: "of capacity"},
	{Issue: "#21", What: "  the link's bound for a client that asks the capabilities first (3 round trips + payload at the link's rate), share of capacity", Bench: "BenchmarkLink/longfat", Metric: "bound-share", Unit: "of capacity"},
	{Issue: "#21", What: "  same run: worst ETA error from 25% done on", Bench: "BenchmarkLink/longfat", Metric: "eta-error", Unit: "of remaining", AtMost: 0.2},
	{Issue: "#21", What: "changing link (150 ms RTT, 16-tile batches, 12,000 tiles, 200 → 20 Mbit/s): back within 0.85 of the new rate (0.5 s window)", Bench: "BenchmarkLink/changing", Metric: "recover-down-s", Unit: "s", AtMost: 10},
	{Issue: "#21", What: "  same run, 20 → 200 Mbit/s: back within 0.85 of the new rate", Bench: "BenchmarkLink/changing", Metric: "recover-up-s", Unit: "s", AtMost: 10},
	{Issue: "#21", What: "  same run: request timeouts tilectl counted", Bench: "BenchmarkLink/changing", Metric: "timeouts", Unit: "timeouts"},
	{Issue: "#21", What: "  same rig: a naive client, 16 in flight, at a steady 200 Mbit/s (the emulator is not the limit)", Bench: "BenchmarkLink/changing", Metric: "naive-c16-steady-share", Unit: "of capacity", AtLeast: 0.9},
	{Issue: "#21", What: "throttling provider (20 batches/s, 429 + Retry-After: 1 beyond): tilectl vs what it allows", Bench: "BenchmarkLink/throttled", Metric: "tilectl-tiles/s", BaselineMetric: "allowed-tiles/s", Unit: "tiles/s", AtLeast: 0.9},
	{Issue: "#21", What: "  same run: share of batch requests answered 429", Bench: "BenchmarkLink/throttled", Metric: "share-429", Unit: "of requests", AtMost: 0.1},
	{Issue: "#21", What: "throttling provider with a burst of 40 batches (20 batches/s beyond): tilectl vs the bucket's least time for the tiles (the burst at once, the rest at its rate, 3 round trips)", Bench: "BenchmarkLink/throttled-burst", Metric: "tilectl-tiles/s", BaselineMetric: "least-tiles/s", Unit: "tiles/s", AtLeast: 0.9},
	{Issue: "#21", What: "  same run: share of batch requests answered 429 (the burst's first refusal meets every batch in flight)", Bench: "BenchmarkLink/throttled-burst", Metric: "share-429", Unit: "of requests"},
	{Issue: "#21", What: "`--bwlimit 2M` on the cellular link: rate the link carried", Bench: "BenchmarkLink/bwlimit", Metric: "achieved-MiB/s", Unit: "MiB/s"},
	{Issue: "#21", What: "  same run: distance from 2 MiB/s", Bench: "BenchmarkLink/bwlimit", Metric: "bwlimit-error", Unit: "of 2 MiB/s", AtMost: 0.05},
	// The whole upload-pending process on loopback, against the naive
	// client with the same batches at 4 in flight, alternated in one run.
	{Issue: "#21", What: "upload-pending process vs naive client, 10,000 x ~1 KiB, 256-tile batches (loopback)", Bench: "BenchmarkUploadPendingProcess/1KiB/batch=256", Metric: "tilectl-tiles/s", BaselineMetric: "naive-tiles/s", Unit: "tiles/s", AtLeast: 0.7},
	{Issue: "#21", What: "  same, 64-tile batches", Bench: "BenchmarkUploadPendingProcess/1KiB/batch=64", Metric: "tilectl-tiles/s", BaselineMetric: "naive-tiles/s", Unit: "tiles/s", AtLeast: 0.7},
	{Issue: "#21", What: "  the 256-tile run: CPU per tile of the whole run (tilectl, postgres, sink), vs the naive client's (client, sink)", Bench: "BenchmarkUploadPendingProcess/1KiB/batch=256", Metric: "tilectl-cpu-us/tile", BaselineMetric: "naive-cpu-us/tile", Unit: "µs/tile"},
	{Issue: "#21", What: "    of which postgres", Bench: "BenchmarkUploadPendingProcess/1KiB/batch=256", Metric: "tilectl-pg-cpu-us/tile", Unit: "µs/tile"},
	{Issue: "#21", What: "upload-pending process vs naive client, 5,000 x ~16 KiB, 256-tile batches (loopback)", Bench: "BenchmarkUploadPendingProcess/16KiB/batch=256", Metric: "tilectl-tiles/s", BaselineMetric: "naive-tiles/s", Unit: "tiles/s", AtLeast: 0.9},
	{Issue: "#21", What: "  same, 64-tile batches", Bench: "BenchmarkUploadPendingProcess/16KiB/batch=64", Metric: "tilectl-tiles/s", BaselineMetric: "naive-tiles/s", Unit: "tiles/s", AtLeast: 0.9},
	{Issue: "#21", What: "  the 256-tile run: CPU per tile of the whole run (tilectl, postgres, sink), vs the naive client's (client, sink)", Bench: "BenchmarkUploadPendingProcess/16KiB/batch=256", Metric: "tilectl-cpu-us/tile", BaselineMetric: "naive-cpu-us/tile", Unit: "µs/tile"},
	{Issue: "#21", What: "    of which postgres", Bench: "BenchmarkUploadPendingProcess/16KiB/batch=256", Metric: "tilectl-pg-cpu-us/tile", Unit: "µs/tile"},
	{Issue: "#21", What: "upload-pending process vs naive client, 2,000 x ~64 KiB, 256-tile batches (loopback)", Bench: "BenchmarkUploadPendingProcess/64KiB/batch=256", Metric: "tilectl-tiles/s", BaselineMetric: "naive-tiles/s", Unit: "tiles/s", AtLeast: 0.9},
	{Issue: "#21", What: "  same, 64-tile batches", Bench: "BenchmarkUploadPendingProcess/64KiB/batch=64", Metric: "tilectl-tiles/s", BaselineMetric: "naive-tiles/s", Unit: "tiles/s", AtLeast: 0.9},
	{Issue: "#21", What: "  the 256-tile run: CPU per tile of the whole run (tilectl, postgres, sink), vs the naive client's (client, sink)", Bench: "BenchmarkUploadPendingProcess/64KiB/batch=256", Metric: "tilectl-cpu-us/tile", BaselineMetric: "naive-cpu-us/tile", Unit: "µs/tile"},
	{Issue: "#21", What: "    of which postgres", Bench: "BenchmarkUploadPendingProcess/64KiB/batch=256", Metric: "tilectl-pg-cpu-us/tile", Unit: "µs/tile"},
	// #22 a flight's life on the ground station.
	{Issue: "#22", What: "`tiles reconcile` of 100,000 uploaded tiles, reference provider on loopback", Bench: "BenchmarkReconcile100k", Metric: "s", Unit: "s", AtMost: 60},
}
