package optable_test

import (
	"testing"

	"github.com/tilectl/tilectl/provider/optable/optabletest"
)

func TestMemoryStoreModel(t *testing.T) {
	t.Parallel()
	optabletest.RunModel(t, memoryHarness(), 2000)
}

func TestPGStoreModel(t *testing.T) {
	t.Parallel()
	optabletest.RunModel(t, pgHarness(t), 300)
}
