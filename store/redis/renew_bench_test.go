package redis_test

// BenchmarkRenew measures one round of lease renewals for 10,000 sessions
// (what a replica holding that many sessions does every --lease-renew):
// one Renew per session (a round trip each) against RenewMany (pipelined,
// 1000 renewals per round trip). ms/round is one round's duration.
//
//	go test -run '^$' -bench Renew -benchtime 5x ./store/redis/

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

func BenchmarkRenew(b *testing.B) {
	testenv.NeedRedis(b)
	const n = 10000
	for _, aof := range []bool{false, true} {
		srv := redistest.Start(b, redistest.Options{AppendOnly: aof})
		s := open(b, srv, redis.Options{})
		ctx := context.Background()
		tokens := make([]string, n)
		gens := make([]uint64, n)
		for i := range tokens {
			tokens[i] = fmt.Sprintf("renew-bench-%05d", i)
			gens[i] = 1
			create(b, s, tokens[i])
		}
		name := "redis"
		if aof {
			name = "redis-aof"
		}
		b.Run(name+"/one-by-one", func(b *testing.B) {
			for b.Loop() {
				until := time.Now().Add(10 * time.Second)
				for i, tok := range tokens {
					if err := s.Renew(ctx, tok, "p1", gens[i], until); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/round")
		})
		b.Run(name+"/RenewMany", func(b *testing.B) {
			for b.Loop() {
				for i, err := range s.RenewMany(ctx, "p1", time.Now().Add(10*time.Second), tokens, gens) {
					if err != nil {
						b.Fatalf("session %d: %v", i, err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/round")
		})
	}
}
