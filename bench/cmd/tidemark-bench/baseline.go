package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Before and after: --baseline REV builds tidemark and benchpeer from
// commit REV of the repository as well (its tree is taken with git
// archive, which changes nothing in the repository) and runs them as
// more rows, tidemark@before, tidemark-min@before and NAME@before for each
// other `tidemark serve` row but the gateways, under the same workloads in
// the same run as the current tree. The report then compares
// each Tidemark row with its baseline (section "Before and after"); the
// baseline rows take no part in the ratios and goals.

// roleBaseline marks the rows built from the baseline commit.
const roleBaseline = "baseline"

// baselineSuffix names a baseline row after the row it is the baseline of.
const baselineSuffix = "@before"

// extractCommit writes the tree of commit rev of the git repository repo
// into dir, and returns the commit's abbreviated hash. Errors: git's, when
// rev names no commit; an entry of the archive that is not a local path.
func extractCommit(ctx context.Context, repo, rev, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "rev-parse", "--short", rev+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("baseline %q: git rev-parse: %w", rev, err)
	}
	commit := strings.TrimSpace(string(out))
	cmd := exec.CommandContext(ctx, "git", "-C", repo, "archive", "--format=tar", commit)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return "", err
	}
	xerr := untar(stdout, dir)
	io.Copy(io.Discard, stdout) // let git finish whatever untar left unread
	if err := cmd.Wait(); err != nil {
		return "", fmt.Errorf("baseline %s: git archive: %w: %s", commit, err, stderr.String())
	}
	if xerr != nil {
		return "", fmt.Errorf("baseline %s: %w", commit, xerr)
	}
	return commit, nil
}

// untar writes the directories, regular files and symbolic links of the
// tar stream r under dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(h.Name) {
			return fmt.Errorf("archive entry %q is not a local path", h.Name)
		}
		path := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode).Perm())
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, path); err != nil {
				return err
			}
		}
	}
}

// beforeAfter renders the comparison of every Tidemark row with its
// baseline row: each ratio metric, and the write system calls per call and
// per event, before, after, and after ÷ before.
func (r *report) beforeAfter(b *strings.Builder) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	var pairs [][2]*row
	for _, t := range r.rows {
		if t.spec.role != roleTidemark && t.spec.role != roleVariant {
			continue
		}
		if base := r.find(t.spec.name + baselineSuffix); base != nil {
			pairs = append(pairs, [2]*row{base, t})
		}
	}
	if len(pairs) == 0 {
		return
	}
	p("## Before and after\n\n")
	p("The rows `NAME%s` are built from commit %s (the tree before the changes this run measures) and ran in this run under the same workloads as `NAME`. after ÷ before: for rates (↑) above 1 is better, for CPU, time, memory and system calls (↓) below 1 is better.\n\n", baselineSuffix, "`"+r.baselineCommit+"`")
	for _, pr := range pairs {
		before, after := pr[0], pr[1]
		p("### %s\n\n| metric | before | after | after ÷ before |\n| --- | ---: | ---: | ---: |\n", after.spec.name)
		for _, m := range r.metrics() {
			if m.ofTasks() {
				continue // the baseline rows do not run (t)
			}
			arrow := "↓"
			if m.higher {
				arrow = "↑"
			}
			bv, bok := m.value(before)
			av, aok := m.value(after)
			p("| %s %s | %s | %s | %s |\n", m.name, arrow, metricCell(m.name, bv, bok), metricCell(m.name, av, aok), ratioCell(av, bv, aok && bok))
		}
		for i, conc := range r.cfg.aConc {
			bv, bok := writesPerCall(before, i)
			av, aok := writesPerCall(after, i)
			p("| (a) write syscalls per call, %d sessions ↓ | %s | %s | %s |\n", conc, floatCell(bv, bok, "%.2f"), floatCell(av, aok, "%.2f"), ratioCell(av, bv, aok && bok))
		}
		for _, bs := range []struct {
			name string
			get  func(*row) resultB
		}{{"1 stream", func(x *row) resultB { return x.b1 }}, {fmt.Sprintf("%d streams", r.cfg.bStreams), func(x *row) resultB { return x.bN }}} {
			bv, av := bs.get(before).writesPerEvent, bs.get(after).writesPerEvent
			p("| (b) write syscalls per event, %s ↓ | %s | %s | %s |\n", bs.name, floatCell(bv, before.hasB, "%.3f"), floatCell(av, after.hasB, "%.3f"), ratioCell(av, bv, before.hasB && after.hasB))
		}
		p("\n")
	}
}

func writesPerCall(x *row, level int) (float64, bool) {
	if level >= len(x.a) || x.a[level].calls == 0 {
		return 0, false
	}
	return x.a[level].writesPerCall, true
}

// metricCell renders a value of the named ratio metric in its unit.
func metricCell(name string, v float64, ok bool) string {
	switch {
	case !ok:
		return "–"
	case strings.Contains(name, "CPU"):
		return cpuCell(time.Duration(v))
	case strings.Contains(name, "replay time"), strings.Contains(name, "storm"):
		return ms(time.Duration(v))
	case strings.Contains(name, "RSS"):
		return fmt.Sprintf("%.1f KiB", v/1024)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

func floatCell(v float64, ok bool, format string) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf(format, v)
}

func ratioCell(after, before float64, ok bool) string {
	if !ok || before == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", after/before)
}
