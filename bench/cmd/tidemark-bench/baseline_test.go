package main

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUntar writes directories, files (with their mode) and symbolic links,
// and refuses an entry outside the target directory.
func TestUntar(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body string) {
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	add(&tar.Header{Name: "cmd/", Typeflag: tar.TypeDir, Mode: 0o755}, "")
	add(&tar.Header{Name: "cmd/run.sh", Typeflag: tar.TypeReg, Mode: 0o755}, "#!/bin/sh\n")
	add(&tar.Header{Name: "go.mod", Typeflag: tar.TypeReg, Mode: 0o644}, "module x\n")
	add(&tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "go.mod"}, "")
	tw.Close()
	dir := t.TempDir()
	if err := untar(bytes.NewReader(buf.Bytes()), dir); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "link")); err != nil || string(b) != "module x\n" {
		t.Fatalf("link → go.mod reads %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "cmd", "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("cmd/run.sh: %v, %v; want mode 0755", fi, err)
	}

	buf.Reset()
	tw = tar.NewWriter(&buf)
	add(&tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644}, "x")
	tw.Close()
	if err := untar(bytes.NewReader(buf.Bytes()), t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a local path") {
		t.Fatalf("untar of ../escape = %v, want a refusal", err)
	}
}

// TestBeforeAfter renders the before-and-after table of a Tidemark row and
// its baseline row, and keeps the baseline row out of the ratio tables.
func TestBeforeAfter(t *testing.T) {
	cfg := quickConfig()
	cfg.aConc = []int{16}
	mk := func(name, role string, rate float64, cpu time.Duration, writes float64, rss float64) *row {
		return &row{
			spec: serverSpec{name: name, role: role},
			a:    []resultA{{conc: 16, calls: 1000, rate: rate, cpuPerCall: cpu, writesPerCall: writes}},
			hasD: true, d: resultD{perSession: rss, streams: 10, streamsTried: 10},
		}
	}
	r := &report{cfg: cfg, baselineCommit: "abc1234", rows: []*row{
		mk("tidemark", roleTidemark, 12000, 60*time.Microsecond, 2, 5*1024),
		mk("tidemark"+baselineSuffix, roleBaseline, 10000, 80*time.Microsecond, 4, 10*1024),
		mk("ceiling", roleCeiling, 30000, 30*time.Microsecond, 3, 1024),
	}}
	var b strings.Builder
	r.beforeAfter(&b)
	md := b.String()
	for _, want := range []string{
		"## Before and after",
		"commit `abc1234`",
		"| (a) calls/s, 16 sessions ↑ | 10000 | 12000 | 1.20 |",
		"| (a) CPU per call, 16 sessions ↓ | 80.0µs | 60.0µs | 0.75 |",
		"| (d) RSS per idle session ↓ | 10.0 KiB | 5.0 KiB | 0.50 |",
		"| (a) write syscalls per call, 16 sessions ↓ | 4.00 | 2.00 | 0.50 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("before-and-after lacks %q:\n%s", want, md)
		}
	}
	b.Reset()
	r.ratios(&b)
	if strings.Contains(b.String(), baselineSuffix) {
		t.Errorf("the ratio tables compare with the baseline row:\n%s", b.String())
	}
}

// TestChooseBaseline: choosing a Tidemark row also chooses its baseline
// row, in table order.
func TestChooseBaseline(t *testing.T) {
	all := specs(toolchain{bin: "/b", baselineBin: "/before"}, nil, nil, nil)
	got, err := choose(all, "tidemark-min,ceiling,tidemark")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got {
		names = append(names, s.name)
	}
	if want := "tidemark tidemark-min tidemark@before tidemark-min@before ceiling"; strings.Join(names, " ") != want {
		t.Fatalf("chosen %q, want %q", strings.Join(names, " "), want)
	}
	if _, err := choose(all, "tidemark,nosuch"); err == nil {
		t.Fatal("an unknown server was accepted")
	}
	got, err = choose(all, "sentinel,redis")
	if err != nil {
		t.Fatal(err)
	}
	names = nil
	for _, s := range got {
		names = append(names, s.name)
	}
	if want := "redis redis@before sentinel sentinel@before"; strings.Join(names, " ") != want {
		t.Fatalf("chosen %q, want %q", strings.Join(names, " "), want)
	}
}

// TestChooseDuplicate: a --tidemark-variant named as a built-in row is
// refused, whatever --servers asks for.
func TestChooseDuplicate(t *testing.T) {
	all := specs(toolchain{bin: "/b"}, []variant{{name: "durable", args: []string{"--data-dir", "/x"}}}, nil, nil)
	if _, err := choose(all, "tidemark"); err == nil || !strings.Contains(err.Error(), `two servers are named "durable"`) {
		t.Fatalf("choose = %v, want the error of two servers named durable", err)
	}
}
