package fdr

import "strings"

// legacyKindPrefix starts the kinds that earlier versions of tilectl wrote
// ("c11.upload.giveup" for what is now "upload.giveup"): the prefix named
// the component of the specification the records came from, not anything
// a reader of the ring needs.
const legacyKindPrefix = "c11."

// CurrentKind is the name a record of kind k goes by now: a kind an
// earlier version wrote is read under today's name, so that a ring holding
// records of both reads as one. Every record read from a ring carries its
// current kind; a kind asked for by a user (fdr tail --kind) is matched
// after the same mapping.
func CurrentKind(k string) string { return strings.TrimPrefix(k, legacyKindPrefix) }
