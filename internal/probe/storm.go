// Check storm. Rule (DESIGN.md, "Where the rule comes from"): sessions that resume at
// once, as in a reconnect storm, each get their own stream exactly: no
// error, no duplicate, nothing missing.

package probe

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// stormRun is one session of the storm.
type stormRun struct {
	status     int
	firstEvent time.Duration // from the release to the first event
	repeated   int
	diff       string
	err        error
}

func checkStorm(ctx context.Context, e *env) Result {
	n := e.cfg.Storm
	if n <= 0 {
		return Result{Verdict: NA, Observed: "--storm 0"}
	}
	if r, ok := e.noStream(); ok {
		return r
	}
	// Without event IDs there is no cursor to resume from: every session
	// of the storm would wait out the check's timeout for a replay that
	// cannot come, and the verdict would name the timeout, not the cause.
	if e.base.lastCursor == "" {
		return Result{Verdict: Fail, Statuses: []int{http.StatusOK},
			Observed: "the baseline call's events carried no ID: the stream cannot be resumed, so no storm was run"}
	}
	preps, i, err := e.prepareStorm(ctx, n)
	if err != nil {
		return failed(nil, err, "storm session %d of %d", i+1, n)
	}
	runs := make([]stormRun, n)
	release := make(chan struct{})
	var t0 time.Time
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-release
			runs[i] = preps[i].resume(ctx, t0, e.base.sigs)
		})
	}
	t0 = time.Now()
	close(release)
	wg.Wait()
	return judgeStorm(runs, time.Since(t0))
}

// stormSession is one session of the storm, cut and ready to resume.
type stormSession struct {
	s      *session
	req    *jsonrpc.Request
	before []event // what the cut connection delivered
}

// prepareStorm opens n sessions at once and starts and cuts a call on
// each. On failure it returns the index of the first session that failed.
func (e *env) prepareStorm(ctx context.Context, n int) ([]stormSession, int, error) {
	preps := make([]stormSession, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, req, before, _, err := e.cutCall(ctx, fmt.Sprintf("probe-storm-%d", i))
			preps[i], errs[i] = stormSession{s, req, before}, err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, i, err
		}
	}
	return preps, 0, nil
}

// resume resumes p's stream from its last cursor and reads it to the
// call's response; durations count from t0, the release of the storm, and
// the messages are compared with sigs, the uncut call's.
func (p stormSession) resume(ctx context.Context, t0 time.Time, sigs []string) stormRun {
	var r stormRun
	rs, err := p.s.resume(ctx, lastCursor(p.before))
	if err != nil {
		r.status, r.err = statusOf(err), err
		return r
	}
	r.status = rs.status
	defer rs.closeWith(ctx)()
	var after []event
	for {
		ev, err := rs.next()
		if err != nil {
			r.err = fmt.Errorf("stream ended without the response: %w", err)
			return r
		}
		if len(after) == 0 {
			r.firstEvent = time.Since(t0)
		}
		after = append(after, ev)
		if resp, ok := ev.msg.(*jsonrpc.Response); ok && resp.ID == p.req.ID {
			break
		}
	}
	all := append(p.before, after...)
	r.repeated = repeats(all)
	r.diff = compare(signatures(all), sigs)
	return r
}

// judgeStorm is the storm's verdict: PASS when every session resumed
// without an error, a repeated event or a difference from the uncut call.
// total is how long the storm took.
func judgeStorm(runs []stormRun, total time.Duration) Result {
	var statuses []int
	errCount, dup, incomplete := 0, 0, 0
	var firsts []time.Duration
	firstErr := ""
	for _, r := range runs {
		statuses = append(statuses, r.status)
		dup += r.repeated
		switch {
		case r.err != nil:
			errCount++
			if firstErr == "" {
				firstErr = r.err.Error()
			}
		case r.diff != "":
			incomplete++
			if firstErr == "" {
				firstErr = r.diff
			}
		default:
			firsts = append(firsts, r.firstEvent)
		}
	}
	codes := map[int]int{}
	for _, s := range statuses {
		codes[s]++
	}
	var cs []string
	for _, c := range slices.Sorted(maps.Keys(codes)) {
		cs = append(cs, fmt.Sprintf("%d×%d", codes[c], c))
	}
	obs := fmt.Sprintf("%d sessions resumed at once: GET %s; all done in %dms (first event p50 %s, max %s); %d errors, %d duplicates, %d incomplete",
		len(runs), strings.Join(cs, " "), total.Milliseconds(), pct(firsts, 50), pct(firsts, 100), errCount, dup, incomplete)
	if errCount+dup+incomplete > 0 {
		if firstErr != "" {
			obs += "; first problem: " + firstErr
		}
		return Result{Verdict: Fail, Statuses: dedupe(statuses), Observed: obs}
	}
	return Result{Verdict: Pass, Statuses: dedupe(statuses), Observed: obs}
}

// dedupe returns the distinct statuses, sorted: a storm's statuses are
// many of the same.
func dedupe(s []int) []int {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// pct returns the p-th percentile of ds, in milliseconds.
func pct(ds []time.Duration, p int) string {
	if len(ds) == 0 {
		return "-"
	}
	ds = slices.Clone(ds)
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	i := (len(ds)*p + 99) / 100
	i = min(max(i-1, 0), len(ds)-1)
	return fmt.Sprintf("%dms", ds[i].Milliseconds())
}
