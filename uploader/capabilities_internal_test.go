package uploader

import "testing"

func TestProviderLimitsAreHonouredDownwardsOnly(t *testing.T) {
	cases := []struct {
		name      string
		caps      Capabilities
		batchSize int
		tiles     int
		bytes     int64
	}{
		{"contract example", Capabilities{MaxBatchTiles: 256, MaxBatchBytes: 32 << 20, MaxTileBytes: 4 << 20}, 0, 256, 32 << 20},
		{"operator asks for fewer", Capabilities{MaxBatchTiles: 256, MaxBatchBytes: 32 << 20}, 8, 8, 32 << 20},
		{"operator cannot ask for more", Capabilities{MaxBatchTiles: 16, MaxBatchBytes: 1 << 20}, 64, 16, 1 << 20},
		{"hostile huge advertisement", Capabilities{MaxBatchTiles: 1_000_000_000, MaxBatchBytes: 1 << 40}, 0, clientMaxBatchTiles, clientMaxBatchBytes},
		{"missing limits use the contract's", Capabilities{}, 0, fallbackBatchTiles, fallbackBatchBytes},
	}
	for _, tc := range cases {
		l := tc.caps.limits(tc.batchSize)
		if l.tiles != tc.tiles || l.bytes != tc.bytes {
			t.Errorf("%s: limits = %d tiles, %d bytes; want %d, %d", tc.name, l.tiles, l.bytes, tc.tiles, tc.bytes)
		}
	}
}
