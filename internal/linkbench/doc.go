// Package linkbench measures what an operator sees on the ground links a
// station actually has: the real `tilectl upload-pending` process at its
// default settings, against the in-memory reference-style provider
// (providertest.Sink) reached through a link emulator (internal/linkemu),
// compared with the link's capacity and with the best of a naive client
// (providertest.BaselineUpload: no journal) at several concurrencies
// through the same link, in the same run. Its benchmarks are run by
// `make bench`, and internal/benchreport turns their metrics into the
// link table of docs/performance.md.
//
// Capacity is the tile payload the link could carry in the time taken:
// a share of capacity is (bytes of tile payload / seconds) / (rate / 8),
// so multipart framing, manifests, HTTP headers and answers count against
// the client, as they do on a real link.
package linkbench
