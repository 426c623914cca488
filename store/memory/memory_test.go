package memory_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
	"github.com/tidemark-mcp/tidemark/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return memory.New(memory.Options{}) })
}

func TestTasksContract(t *testing.T) {
	storetest.RunTasks(t, func(t *testing.T) store.Store { return memory.New(memory.Options{}) })
}
