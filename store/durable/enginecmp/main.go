// Command enginecmp measures the three candidate embedded engines for
// Tidemark's durable store on the workload the store puts on them:
//
//   - append: concurrent appends of one event (+ the session's log meta) from
//     C goroutines (sessions), each durable (fsync) before it returns,
//     group-committed by one committer goroutine (the same committer for
//     every engine: appends that arrive while a commit is in flight share the
//     next one);
//   - replay: read 10,000 events of one session in order, after reopening;
//   - range deletion: delete the oldest 90% of 10 sessions' logs;
//   - size: data directory size before and after compaction.
//
// It lives in a module of its own so that the engines not chosen stay out of
// Tidemark's dependencies. Usage, from this directory:
//
//	go run . [-appends 20000] [-compact-events 200000]
//
// It prints a Markdown table; store/durable's package comment summarizes
// the outcome.
package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	bolt "go.etcd.io/bbolt"
	_ "modernc.org/sqlite"
)

type op struct {
	token   string
	seq     uint64
	payload []byte
}

type engine interface {
	name() string
	// commit writes ops (events + meta per op) durably in one transaction.
	commit(ops []op) error
	// replay reads count events of token with seq > 0, returns how many.
	replay(token string, count int) (int, error)
	// deleteRange deletes token's events with seq < below.
	deleteRange(token string, below uint64) error
	// compact reclaims space after deletions.
	compact() error
	close() error
}

func evKey(token string, seq uint64) []byte {
	k := make([]byte, 0, 1+len(token)+8)
	k = append(k, 'e')
	k = append(k, token...)
	return binary.BigEndian.AppendUint64(k, seq)
}

func metaKey(token string) []byte { return append([]byte{'m'}, token...) }

func metaVal(seq uint64) []byte {
	v := make([]byte, 32)
	binary.BigEndian.PutUint64(v, 1)
	binary.BigEndian.PutUint64(v[8:], 1)
	binary.BigEndian.PutUint64(v[16:], seq)
	binary.BigEndian.PutUint64(v[24:], seq*264)
	return v
}

// ---- pebble ----

type pebbleEngine struct{ db *pebble.DB }

func openPebble(dir string) (engine, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quiet{}})
	if err != nil {
		return nil, err
	}
	return &pebbleEngine{db}, nil
}

type quiet struct{}

func (quiet) Infof(string, ...any)  {}
func (quiet) Errorf(string, ...any) {}
func (quiet) Fatalf(f string, a ...any) {
	panic(fmt.Sprintf(f, a...))
}

func (e *pebbleEngine) name() string { return "pebble v2.1.7" }
func (e *pebbleEngine) commit(ops []op) error {
	b := e.db.NewBatch()
	for _, o := range ops {
		b.Set(evKey(o.token, o.seq), o.payload, nil)
		b.Set(metaKey(o.token), metaVal(o.seq), nil)
	}
	return b.Commit(pebble.Sync)
}
func (e *pebbleEngine) replay(token string, count int) (int, error) {
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: evKey(token, 0), UpperBound: evKey(token, 1<<63)})
	if err != nil {
		return 0, err
	}
	n := 0
	for it.First(); it.Valid() && n < count; it.Next() {
		_ = it.Value()
		n++
	}
	return n, it.Close()
}
func (e *pebbleEngine) deleteRange(token string, below uint64) error {
	return e.db.DeleteRange(evKey(token, 0), evKey(token, below), pebble.Sync)
}
func (e *pebbleEngine) compact() error {
	if err := e.db.Flush(); err != nil {
		return err
	}
	return e.db.Compact(context.Background(), []byte{0}, []byte{0xff}, true)
}
func (e *pebbleEngine) close() error { return e.db.Close() }

// ---- bbolt ----

type boltEngine struct{ db *bolt.DB }

func openBolt(dir string) (engine, error) {
	os.MkdirAll(dir, 0o755)
	db, err := bolt.Open(filepath.Join(dir, "data.db"), 0o600, nil)
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists([]byte("e"))
		if err == nil {
			_, err = tx.CreateBucketIfNotExists([]byte("m"))
		}
		return err
	})
	return &boltEngine{db}, err
}
func (e *boltEngine) name() string { return "bbolt v1.5.0" }
func (e *boltEngine) commit(ops []op) error {
	return e.db.Update(func(tx *bolt.Tx) error {
		eb, mb := tx.Bucket([]byte("e")), tx.Bucket([]byte("m"))
		for _, o := range ops {
			if err := eb.Put(evKey(o.token, o.seq), o.payload); err != nil {
				return err
			}
			if err := mb.Put(metaKey(o.token), metaVal(o.seq)); err != nil {
				return err
			}
		}
		return nil
	})
}
func (e *boltEngine) replay(token string, count int) (int, error) {
	n := 0
	err := e.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket([]byte("e")).Cursor()
		hi := evKey(token, 1<<63)
		for k, v := c.Seek(evKey(token, 0)); k != nil && bytes.Compare(k, hi) < 0 && n < count; k, v = c.Next() {
			_ = v
			n++
		}
		return nil
	})
	return n, err
}
func (e *boltEngine) deleteRange(token string, below uint64) error {
	return e.db.Update(func(tx *bolt.Tx) error {
		c := tx.Bucket([]byte("e")).Cursor()
		hi := evKey(token, below)
		for k, _ := c.Seek(evKey(token, 0)); k != nil && bytes.Compare(k, hi) < 0; k, _ = c.Seek(evKey(token, 0)) {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
}

// compact: bbolt never shrinks its file online; freed pages are reused. The
// only way to reclaim disk is bolt.Compact into a new file and a swap, which
// needs the store closed. Measured here as that offline copy.
func (e *boltEngine) compact() error {
	path := e.db.Path()
	dst, err := bolt.Open(path+".compact", 0o600, nil)
	if err != nil {
		return err
	}
	if err := bolt.Compact(dst, e.db, 1<<20); err != nil {
		return err
	}
	dst.Close()
	e.db.Close()
	if err := os.Rename(path+".compact", path); err != nil {
		return err
	}
	db, err := bolt.Open(path, 0o600, nil)
	e.db = db
	return err
}
func (e *boltEngine) close() error { return e.db.Close() }

// ---- sqlite ----

type sqliteEngine struct {
	db             *sql.DB
	insEv, insMeta *sql.Stmt
}

func openSQLite(dir string) (engine, error) {
	os.MkdirAll(dir, 0o755)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "data.db")+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=auto_vacuum(INCREMENTAL)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS events (token TEXT NOT NULL, seq INTEGER NOT NULL, data BLOB, PRIMARY KEY (token, seq)) WITHOUT ROWID`,
		`CREATE TABLE IF NOT EXISTS meta (token TEXT PRIMARY KEY, v BLOB)`,
	} {
		if _, err := db.Exec(q); err != nil {
			return nil, err
		}
	}
	e := &sqliteEngine{db: db}
	if e.insEv, err = db.Prepare(`INSERT INTO events (token, seq, data) VALUES (?, ?, ?)`); err != nil {
		return nil, err
	}
	if e.insMeta, err = db.Prepare(`INSERT INTO meta (token, v) VALUES (?, ?) ON CONFLICT(token) DO UPDATE SET v = excluded.v`); err != nil {
		return nil, err
	}
	return e, nil
}
func (e *sqliteEngine) name() string { return "sqlite (modernc v1.62.0)" }
func (e *sqliteEngine) commit(ops []op) error {
	tx, err := e.db.Begin()
	if err != nil {
		return err
	}
	ie, im := tx.Stmt(e.insEv), tx.Stmt(e.insMeta)
	for _, o := range ops {
		if _, err := ie.Exec(o.token, int64(o.seq), o.payload); err != nil {
			tx.Rollback()
			return err
		}
		if _, err := im.Exec(o.token, metaVal(o.seq)); err != nil {
			tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}
func (e *sqliteEngine) replay(token string, count int) (int, error) {
	rows, err := e.db.Query(`SELECT seq, data FROM events WHERE token = ? AND seq > 0 ORDER BY seq LIMIT ?`, token, count)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var seq int64
		var data []byte
		if err := rows.Scan(&seq, &data); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}
func (e *sqliteEngine) deleteRange(token string, below uint64) error {
	_, err := e.db.Exec(`DELETE FROM events WHERE token = ? AND seq < ?`, token, int64(below))
	return err
}
func (e *sqliteEngine) compact() error {
	if _, err := e.db.Exec(`PRAGMA incremental_vacuum`); err != nil {
		return err
	}
	_, err := e.db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
	return err
}
func (e *sqliteEngine) close() error { return e.db.Close() }

// ---- group committer (the same for every engine) ----

type req struct {
	o    op
	done chan error
}

type committer struct {
	e       engine
	in      chan req
	commits int
}

func newCommitter(e engine) *committer {
	c := &committer{e: e, in: make(chan req, 4096)}
	go c.run()
	return c
}

func (c *committer) run() {
	for r := range c.in {
		group := []req{r}
	drain:
		for len(group) < 1024 {
			select {
			case r, ok := <-c.in:
				if !ok {
					break drain
				}
				group = append(group, r)
			default:
				break drain
			}
		}
		ops := make([]op, len(group))
		for i, g := range group {
			ops[i] = g.o
		}
		err := c.e.commit(ops)
		c.commits++
		for _, g := range group {
			g.done <- err
		}
	}
}

func (c *committer) append(o op) error {
	done := make(chan error, 1)
	c.in <- req{o, done}
	return <-done
}

// ---- measurements ----

func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func token(i int) string { return fmt.Sprintf("TOKEN%021d", i) }

type result struct {
	engine                   string
	appendsPerSec            [2]float64
	p50, p99                 [2]time.Duration
	fsyncsPerAppend          [2]float64
	replay10k                time.Duration
	deleteTime, compactTime  time.Duration
	sizeBefore, sizeAfterDel int64
	sizeAfter                int64
}

// payload is a realistic event: a progress notification of ~150 bytes.
func payload(tok string, seq uint64) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"%s-%d","progress":%d,"total":1000000,"message":"step %d of 1000000"}}`, tok[:8], seq%977, seq, seq)
}

func measureAppends(e engine, conc, total, base int) (float64, time.Duration, time.Duration, float64) {
	c := newCommitter(e)
	per := total / conc
	lat := make([]time.Duration, 0, total)
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for g := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := token(base + g)
			local := make([]time.Duration, 0, per)
			for i := range per {
				t0 := time.Now()
				if err := c.append(op{tok, uint64(i + 1), payload(tok, uint64(i+1))}); err != nil {
					panic(err)
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	close(c.in)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	n := len(lat)
	return float64(n) / el.Seconds(), lat[n/2], lat[n*99/100], float64(c.commits) / float64(n)
}

func run(name string, open func(string) (engine, error), appends, compactEvents int) result {
	dir, _ := os.MkdirTemp("", "enginecmp-")
	defer os.RemoveAll(dir)
	e, err := open(dir)
	if err != nil {
		panic(err)
	}
	r := result{engine: e.name()}
	for i, conc := range []int{8, 64} {
		r.appendsPerSec[i], r.p50[i], r.p99[i], r.fsyncsPerAppend[i] = measureAppends(e, conc, appends, 1000*(i+1))
	}
	// Fill: one session of 10k events for replay, and 10 sessions with
	// compactEvents/10 events each, in large batches (not the measurement).
	fill := func(tok string, n int) {
		for s := 1; s <= n; s += 1000 {
			ops := make([]op, 0, 1000)
			for q := s; q < s+1000 && q <= n; q++ {
				ops = append(ops, op{tok, uint64(q), payload(tok, uint64(q))})
			}
			if err := e.commit(ops); err != nil {
				panic(err)
			}
		}
	}
	fill(token(1), 10000)
	for i := range 10 {
		fill(token(100+i), compactEvents/10)
	}
	e.close()
	if e, err = open(dir); err != nil {
		panic(err)
	}
	t0 := time.Now()
	n, err := e.replay(token(1), 10000)
	r.replay10k = time.Since(t0)
	if err != nil || n != 10000 {
		panic(fmt.Sprintf("%s replay: %d events, %v", name, n, err))
	}
	r.sizeBefore = dirSize(dir)
	t0 = time.Now()
	for i := range 10 {
		if err := e.deleteRange(token(100+i), uint64(compactEvents/10*9/10)+1); err != nil {
			panic(err)
		}
	}
	r.deleteTime = time.Since(t0)
	r.sizeAfterDel = dirSize(dir)
	t0 = time.Now()
	if err := e.compact(); err != nil {
		panic(err)
	}
	r.compactTime = time.Since(t0)
	e.close() // lets background deletion of obsolete files finish
	r.sizeAfter = dirSize(dir)
	return r
}

func main() {
	appends := flag.Int("appends", 20000, "durable appends per concurrency level")
	compactEvents := flag.Int("compact-events", 200000, "events written then 90% range-deleted")
	flag.Parse()
	var rs []result
	for _, c := range []struct {
		name string
		open func(string) (engine, error)
	}{{"pebble", openPebble}, {"bbolt", openBolt}, {"sqlite", openSQLite}} {
		rs = append(rs, run(c.name, c.open, *appends, *compactEvents))
		fmt.Fprintf(os.Stderr, "%s done\n", c.name)
	}
	fmt.Printf("appends: %d durable appends of one ~150-byte progress event + meta, per concurrency level; compaction set: %d events (10 sessions), oldest 90%% range-deleted\n\n", *appends, *compactEvents)
	fmt.Println("| engine | appends/s (8 sessions) | p50 / p99 (8) | fsync groups per append (8) | appends/s (64 sessions) | p50 / p99 (64) | replay 10k events | range delete 90% | compaction | dir size before | after delete | after compaction |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rs {
		fmt.Printf("| %s | %.0f | %v / %v | %.2f | %.0f | %v / %v | %v | %v | %v | %.1f MiB | %.1f MiB | %.1f MiB |\n",
			r.engine, r.appendsPerSec[0], r.p50[0].Round(time.Microsecond), r.p99[0].Round(time.Microsecond), r.fsyncsPerAppend[0],
			r.appendsPerSec[1], r.p50[1].Round(time.Microsecond), r.p99[1].Round(time.Microsecond),
			r.replay10k.Round(time.Microsecond), r.deleteTime.Round(time.Microsecond), r.compactTime.Round(time.Millisecond),
			float64(r.sizeBefore)/(1<<20), float64(r.sizeAfterDel)/(1<<20), float64(r.sizeAfter)/(1<<20))
	}
}
