// flush_test.go tests when a stream's headers and first events reach the
// client.

package transport_test

import (
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
)

// TestFlushBeforeFirstEvent: a stream's headers, and its priming event
// where there is one, reach the client before the first message, however
// long that takes: the transport leaves the headers of a primed stream to
// go out with the priming event, and of an unprimed one (2025-03-26) it
// flushes them at once. A slow call's stream, and the standalone stream,
// must therefore open within a few seconds although no message comes.
func TestFlushBeforeFirstEvent(t *testing.T) {
	for _, version := range []string{"2025-03-26", "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			ctx := testContext(t)
			st := newStack(t, nil, nil, nil)
			s := st.initialize(t, ctx, version)
			opened := make(chan error, 2)
			var c, g *mcptest.Stream
			go func() {
				var err error
				c, err = s.Call(ctx, mcptest.ToolCall(2, "countdown", map[string]any{"n": 1, "delay_ms": 60000}, nil))
				opened <- err
			}()
			go func() {
				var err error
				g, err = s.Get(ctx)
				opened <- err
			}()
			for range 2 {
				select {
				case err := <-opened:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("a stream with no message yet did not open (headers not sent) within 5 s")
				}
			}
			defer c.Close()
			defer g.Close()
			if version == "2025-11-25" {
				wantPriming(t, next(t, c), "", time.Second)
				wantPriming(t, next(t, g), "", time.Second)
			}
			if err := s.Delete(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
