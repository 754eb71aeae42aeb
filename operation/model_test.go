package operation_test

import (
	"testing"

	"github.com/tilectl/tilectl/operation/operationtest"
)

func TestMemoryStoreModel(t *testing.T) {
	t.Parallel()
	operationtest.RunModel(t, memoryHarness(), 2000)
}

func TestPGStoreModel(t *testing.T) {
	t.Parallel()
	operationtest.RunModel(t, pgHarness(t), 300)
}
