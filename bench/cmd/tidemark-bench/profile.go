package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Profiling runs Tidemark in benchpeer (the same handler as `tidemark
// serve`, plus net/http/pprof and expvar on a second port, flag --pprof) under
// (a) at 16 sessions and (b) on 1 and on 256 streams, and records per
// operation: server CPU, heap allocations (runtime.MemStats, exact), write
// and read system calls (/proc/PID/io), plus CPU, allocation, mutex and
// block profiles of the window.

// profileResult is every profiled run.
type profileResult struct {
	dir  string
	runs []profileRun
}

// profileRun is one kind of server under one workload.
type profileRun struct {
	kind, workload string
	opName         string // "call" or "event"
	ops            int
	elapsed        time.Duration
	rate           float64
	cpuPerOp       time.Duration
	mallocsPerOp   float64
	bytesPerOp     float64
	gcs            uint32
	writesPerOp    float64
	readsPerOp     float64
	tops           map[string]string // profile name → pprof -top excerpt
	err            string
}

type memStats struct {
	Mallocs    uint64
	TotalAlloc uint64
	NumGC      uint32
}

func runProfiles(ctx context.Context, tc toolchain, cfg config, dir, work string, progress func(string, ...any)) (*profileResult, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	res := &profileResult{dir: dir}
	window := 10 * time.Second
	if cfg.quick {
		window = 2 * time.Second
	}
	for _, kind := range []string{"tidemark", "tidemark-min"} {
		spec := serverSpec{name: kind + "-pprof", role: roleTidemark, argv: func(port int) []string {
			return []string{filepath.Join(tc.bin, "benchpeer"), "--kind", kind, "--addr", "127.0.0.1:" + strconv.Itoa(port)}
		}}
		for _, wl := range []string{"a16", "b1", "b256"} {
			pr := profileRun{kind: kind, workload: wl, tops: map[string]string{}}
			if err := profileOne(ctx, spec, cfg, window, dir, work, &pr); err != nil {
				pr.err = err.Error()
			}
			progress("profile %-12s %-4s: %.0f %ss/s, cpu %s/%s, %.1f allocs/%s, %.0f B/%s, writes %.3f/%s, reads %.3f/%s %s",
				kind, wl, pr.rate, pr.opName, us(pr.cpuPerOp), pr.opName, pr.mallocsPerOp, pr.opName, pr.bytesPerOp, pr.opName,
				pr.writesPerOp, pr.opName, pr.readsPerOp, pr.opName, pr.err)
			res.runs = append(res.runs, pr)
		}
	}
	return res, nil
}

func profileOne(ctx context.Context, spec serverSpec, cfg config, window time.Duration, dir, work string, pr *profileRun) error {
	pport, err := freePort()
	if err != nil {
		return err
	}
	paddr := "127.0.0.1:" + strconv.Itoa(pport)
	s, err := startServer(ctx, spec, work, pr.workload, "--pprof", paddr)
	if err != nil {
		return err
	}
	defer s.stop()
	base := "http://" + paddr
	prefix := filepath.Join(dir, pr.kind+"-"+pr.workload)

	hc := &http.Client{Transport: newTransport(cfg.bStreams)}
	defer hc.CloseIdleConnections()
	var clients []*client
	switch pr.workload {
	case "a16":
		pr.opName = "call"
		clients, err = createClients(ctx, hc, s, 16, cfg.parallel)
		if err == nil {
			callLoop(ctx, clients, cfg.aWarm)
		}
	case "b1":
		pr.opName = "event"
		clients, err = createClients(ctx, hc, s, 1, 1)
		if err == nil {
			_, err = clients[0].countdown(ctx, 1000, 0, true, false)
		}
	case "b256":
		pr.opName = "event"
		clients, err = createClients(ctx, hc, s, cfg.bStreams, cfg.parallel)
	}
	if err != nil {
		return err
	}

	for _, p := range []string{"allocs", "mutex", "block"} {
		if err := fetch(ctx, base+"/debug/pprof/"+p, prefix+"-"+p+"-before.pb.gz"); err != nil {
			return err
		}
	}
	msBefore, err := readMemStats(ctx, base)
	if err != nil {
		return err
	}
	procBefore, _ := readProc(s.pid)
	var cpuErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		cpuErr = fetch(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, int(window.Seconds())), prefix+"-cpu.pb.gz")
	}()
	start := time.Now()
	switch pr.workload {
	case "a16":
		r := callLoop(ctx, clients, window)
		pr.ops = r.calls
	case "b1":
		for time.Since(start) < window {
			res, err := clients[0].countdown(ctx, cfg.b1N, 0, true, false)
			if err != nil {
				return err
			}
			pr.ops += res.progress
		}
	case "b256":
		for time.Since(start) < window {
			var mu sync.Mutex
			var cw sync.WaitGroup
			for _, c := range clients {
				cw.Add(1)
				go func() {
					defer cw.Done()
					res, err := c.countdown(ctx, cfg.bN, 0, true, false)
					if err == nil {
						mu.Lock()
						pr.ops += res.progress
						mu.Unlock()
					}
				}()
			}
			cw.Wait()
		}
	}
	pr.elapsed = time.Since(start)
	procAfter, _ := readProc(s.pid)
	msAfter, err := readMemStats(ctx, base)
	if err != nil {
		return err
	}
	wg.Wait()
	if cpuErr != nil {
		return cpuErr
	}
	for _, p := range []string{"allocs", "mutex", "block"} {
		if err := fetch(ctx, base+"/debug/pprof/"+p, prefix+"-"+p+"-after.pb.gz"); err != nil {
			return err
		}
	}
	if pr.ops == 0 {
		return fmt.Errorf("no %s completed", pr.opName)
	}
	n := float64(pr.ops)
	pr.rate = n / pr.elapsed.Seconds()
	pr.cpuPerOp = (procAfter.cpu - procBefore.cpu) / time.Duration(pr.ops)
	pr.mallocsPerOp = float64(msAfter.Mallocs-msBefore.Mallocs) / n
	pr.bytesPerOp = float64(msAfter.TotalAlloc-msBefore.TotalAlloc) / n
	pr.gcs = msAfter.NumGC - msBefore.NumGC
	pr.writesPerOp = float64(procAfter.writes-procBefore.writes) / n
	pr.readsPerOp = float64(procAfter.reads-procBefore.reads) / n

	tops := []struct {
		name, file string
		args       []string
	}{
		{"cpu", prefix + "-cpu.txt", []string{"-top", "-nodecount=25", prefix + "-cpu.pb.gz"}},
		{"cpu-cum", prefix + "-cpu-cum.txt", []string{"-top", "-cum", "-nodecount=40", prefix + "-cpu.pb.gz"}},
		{"alloc_space", prefix + "-alloc-space.txt", []string{"-top", "-nodecount=25", "-sample_index=alloc_space", "-base", prefix + "-allocs-before.pb.gz", prefix + "-allocs-after.pb.gz"}},
		{"alloc_objects", prefix + "-alloc-objects.txt", []string{"-top", "-nodecount=25", "-sample_index=alloc_objects", "-base", prefix + "-allocs-before.pb.gz", prefix + "-allocs-after.pb.gz"}},
		{"mutex", prefix + "-mutex.txt", []string{"-top", "-nodecount=15", "-sample_index=delay", "-base", prefix + "-mutex-before.pb.gz", prefix + "-mutex-after.pb.gz"}},
		{"block", prefix + "-block.txt", []string{"-top", "-nodecount=15", "-sample_index=delay", "-base", prefix + "-block-before.pb.gz", prefix + "-block-after.pb.gz"}},
	}
	for _, t := range tops {
		out, err := exec.CommandContext(ctx, "go", append([]string{"tool", "pprof"}, t.args...)...).CombinedOutput()
		if err != nil {
			pr.tops[t.name] = "pprof failed: " + err.Error() + ": " + trim(out)
			continue
		}
		os.WriteFile(t.file, out, 0o644)
		pr.tops[t.name] = string(out)
	}
	return nil
}

func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func readMemStats(ctx context.Context, base string) (memStats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/debug/vars", nil)
	if err != nil {
		return memStats{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return memStats{}, err
	}
	defer resp.Body.Close()
	var v struct{ Memstats memStats }
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return memStats{}, err
	}
	return v.Memstats, nil
}

// markdown renders the profile section: per-operation figures and the top
// of each profile.
func (pr *profileResult) markdown(b *strings.Builder) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Profiles of Tidemark\n\n")
	p("`benchpeer --kind tidemark|tidemark-min --pprof ADDR` serves the same handler as the rows above, in process, with net/http/pprof and expvar. Windows: (a) 16 sessions calling `countdown {n: 1}`; (b) one stream repeating `countdown {n: 20000}` with progress; (b) 256 streams repeating `countdown {n}` with progress. Allocations are exact (runtime.MemStats deltas); system calls from /proc/PID/io. Profiles are in `%s`.\n\n", pr.dir)
	p("| server | workload | ops/s | CPU per op | allocs per op | bytes per op | GCs | write syscalls per op | read syscalls per op |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range pr.runs {
		if r.err != "" {
			p("| %s | %s | – | – | – | – | – | – | %s |\n", r.kind, r.workload, mdEscape(trimString(r.err)))
			continue
		}
		p("| %s | %s (per %s) | %.0f | %s | %.1f | %.0f | %d | %.3f | %.3f |\n", r.kind, r.workload, r.opName, r.rate, us(r.cpuPerOp), r.mallocsPerOp, r.bytesPerOp, r.gcs, r.writesPerOp, r.readsPerOp)
	}
	p("\n")
	for _, r := range pr.runs {
		if r.err != "" {
			continue
		}
		for _, name := range []string{"cpu", "alloc_space", "mutex"} {
			top := r.tops[name]
			if top == "" {
				continue
			}
			lines := strings.Split(strings.TrimSpace(top), "\n")
			// Keep the summary and the first rows.
			for i, l := range lines {
				if strings.Contains(l, "flat%") {
					lines = lines[max(0, i-2):min(len(lines), i+13)]
					break
				}
			}
			p("<details><summary>%s %s: %s</summary>\n\n```\n%s\n```\n</details>\n\n", r.kind, r.workload, name, strings.Join(lines, "\n"))
		}
	}
}
