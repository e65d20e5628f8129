package harness

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Summary is one system on one workload over every round of a run: the
// median of each figure over the rounds, and anchordb's ratio to the
// system as the median of the per-round ratios (each round's anchordb run
// against the same round's run of the system), with the spread of each.
type Summary struct {
	Workload string `json:"workload"`
	System   string `json:"system"`
	Config   string `json:"config,omitempty"`
	Rounds   int    `json:"rounds"`
	Records  int    `json:"records"`
	// RecordsSec is the median records/s over the rounds; Min and Max
	// bound it.
	RecordsSec    float64 `json:"records_per_sec"`
	RecordsSecMin float64 `json:"records_per_sec_min"`
	RecordsSecMax float64 `json:"records_per_sec_max"`
	P50us         float64 `json:"p50_us"`
	P99us         float64 `json:"p99_us"`
	P999us        float64 `json:"p999_us"`
	DiskBytes     int64   `json:"disk_bytes"`
	PeakHeapMB    float64 `json:"peak_heap_mb"`
	// The space workload's medians.
	SettledBytes       int64 `json:"settled_bytes,omitempty"`
	CompactedBytes     int64 `json:"compacted_bytes,omitempty"`
	CompactedFileBytes int64 `json:"compacted_file_bytes,omitempty"`
	LogicalBytes       int64 `json:"logical_bytes,omitempty"`
	// Ratio compares anchordb with the system (see RatioMeaning), the
	// median over the rounds of the per-round ratio; 0 for anchordb itself
	// or when no round has both. For space, Ratio is of the bytes
	// allocated after settling, Ratio2 after compaction, Ratio3 of the
	// files' sizes after compaction.
	Ratio    float64 `json:"ratio,omitempty"`
	RatioMin float64 `json:"ratio_min,omitempty"`
	RatioMax float64 `json:"ratio_max,omitempty"`
	Ratio2   float64 `json:"ratio2,omitempty"`
	Ratio3   float64 `json:"ratio3,omitempty"`
	Skipped  string  `json:"skipped,omitempty"`
}

// RatioMeaning says what Summary.Ratio is for a workload.
func RatioMeaning(workload string) string {
	switch workload {
	case "proof":
		return "system p99 ÷ anchordb p99 (above 1: anchordb proves sooner)"
	case "space":
		return "anchordb bytes ÷ system bytes: allocated after settling; allocated after compaction; file sizes after compaction (below 1: anchordb holds less)"
	}
	return "anchordb records/s ÷ system records/s (above 1: anchordb faster)"
}

// pairRatio is one round's ratios of anchordb's run a to the system's run
// s (0 when one has no meaning): one for most workloads, three for space.
func pairRatio(w string, a, s Result) [3]float64 {
	switch w {
	case "proof":
		if a.P99us > 0 {
			return [3]float64{s.P99us / a.P99us}
		}
	case "space":
		if s.SettledBytes > 0 && s.CompactedBytes > 0 && s.CompactedFileBytes > 0 {
			return [3]float64{float64(a.SettledBytes) / float64(s.SettledBytes),
				float64(a.CompactedBytes) / float64(s.CompactedBytes),
				float64(a.CompactedFileBytes) / float64(s.CompactedFileBytes)}
		}
	default:
		if s.RecordsSec > 0 {
			return [3]float64{a.RecordsSec / s.RecordsSec}
		}
	}
	return [3]float64{}
}

// Median returns the median of xs (the mean of the middle two for an even
// count), and 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Summarize folds a run's results into one Summary per workload and
// system, in the order they first appear.
func Summarize(rs []Result) []Summary {
	type key struct{ w, s string }
	var order []key
	by := map[key][]Result{}
	for _, r := range rs {
		k := key{r.Workload, r.System}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], r)
	}
	var out []Summary
	for _, k := range order {
		runs := by[k]
		s := Summary{Workload: k.w, System: k.s, Config: runs[0].Config}
		var ran []Result
		for _, r := range runs {
			if r.Skipped != "" {
				s.Skipped = r.Skipped
				continue
			}
			ran = append(ran, r)
		}
		s.Rounds = len(ran)
		if len(ran) == 0 {
			out = append(out, s)
			continue
		}
		get := func(f func(Result) float64) []float64 {
			v := make([]float64, len(ran))
			for i, r := range ran {
				v[i] = f(r)
			}
			return v
		}
		rps := get(func(r Result) float64 { return r.RecordsSec })
		s.Records = ran[0].Records
		s.RecordsSec, s.RecordsSecMin, s.RecordsSecMax = Median(rps), slices.Min(rps), slices.Max(rps)
		s.P50us = Median(get(func(r Result) float64 { return r.P50us }))
		s.P99us = Median(get(func(r Result) float64 { return r.P99us }))
		s.P999us = Median(get(func(r Result) float64 { return r.P999us }))
		s.DiskBytes = int64(Median(get(func(r Result) float64 { return float64(r.DiskBytes) })))
		s.PeakHeapMB = Median(get(func(r Result) float64 { return r.PeakHeapMB }))
		s.SettledBytes = int64(Median(get(func(r Result) float64 { return float64(r.SettledBytes) })))
		s.CompactedBytes = int64(Median(get(func(r Result) float64 { return float64(r.CompactedBytes) })))
		s.CompactedFileBytes = int64(Median(get(func(r Result) float64 { return float64(r.CompactedFileBytes) })))
		s.LogicalBytes = ran[0].LogicalBytes
		if k.s != "anchordb" {
			var rs [3][]float64
			for _, r := range ran {
				for _, a := range by[key{k.w, "anchordb"}] {
					if a.Round == r.Round && a.Skipped == "" {
						for i, x := range pairRatio(k.w, a, r) {
							if x > 0 {
								rs[i] = append(rs[i], x)
							}
						}
					}
				}
			}
			if len(rs[0]) > 0 {
				s.Ratio, s.RatioMin, s.RatioMax = Median(rs[0]), slices.Min(rs[0]), slices.Max(rs[0])
			}
			s.Ratio2, s.Ratio3 = Median(rs[1]), Median(rs[2])
		}
		out = append(out, s)
	}
	return out
}

// Header is what a results file says before its tables: the machine, the
// code and when.
type Header struct {
	Machine string    `json:"machine"`
	Commit  string    `json:"commit,omitempty"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
}

// Lines prints the header.
func (h Header) Lines(w io.Writer) {
	fmt.Fprintf(w, "machine: %s\n", h.Machine)
	if h.Commit != "" {
		fmt.Fprintf(w, "commit: %s\n", h.Commit)
	}
	if !h.Started.IsZero() {
		fmt.Fprintf(w, "date: %s – %s UTC\n", h.Started.UTC().Format("2006-01-02 15:04"), h.Ended.UTC().Format("15:04"))
	}
}

// describe says what one workload's table measured.
func describe(w string, cfg Config) string {
	switch w {
	case "sync-append":
		return fmt.Sprintf("%d records of %d-byte values from %d writers, each durable on return; the clock stops when the system is at rest", cfg.Count, cfg.ValueSize, cfg.Writers)
	case "batch-sync":
		return fmt.Sprintf("%d records in durable batches of %d, one writer, latency per batch; the clock stops when the system is at rest", cfg.Count/cfg.BatchSize*cfg.BatchSize, cfg.BatchSize)
	case "nosync-append":
		return fmt.Sprintf("%d records from one writer, acknowledged before any fsync (each system's weakest acknowledged mode); the clock stops when the system is at rest", cfg.Count)
	case "get":
		return fmt.Sprintf("%d keys loaded in batches of %d, then %d reads in a fixed random order, straight after the load (memtables as the load left them)", cfg.Count, cfg.BatchSize, cfg.Count*cfg.readPasses())
	case "get-flushed":
		return fmt.Sprintf("as get, with every system settled first (flushed, no compaction in progress): %d reads", cfg.Count*cfg.readPasses())
	case "history":
		return fmt.Sprintf("%d keys × %d versions, then each key's versions read newest first (%d passes); records are versions, latency per key", max(1, cfg.Count/HistoryVersions), HistoryVersions, cfg.readPasses())
	case "merge":
		return fmt.Sprintf("one pass over %d records in the merged order (one operation)", cfg.Count)
	case "verify":
		return fmt.Sprintf("one full verification of %d records with %d thread(s) on every system (one operation)", cfg.Count, cfg.verifyThreads())
	case "snapshot":
		return fmt.Sprintf("one durable snapshot of the state of %d keys (one operation)", cfg.Count)
	case "proof":
		return fmt.Sprintf("%d records loaded, then %d appends one after the other, each timed from its acknowledgement to a signed checkpoint covering it (for anchordb, made on demand, with the record's inclusion proof checked against it; for file+fdatasync, the write and fdatasync itself)", min(cfg.Count, ProofBase), cfg.proofOps())
	case "space":
		return fmt.Sprintf("%d records of %d-byte values (logical bytes: key and value, %d a record), loaded in batches of %d; bytes allocated on disk after settling and after a full compaction", cfg.Count, cfg.ValueSize, 16+cfg.ValueSize, cfg.BatchSize)
	}
	return w
}

// Table writes the results as one table per workload: each system's medians
// over the rounds and its ratio to anchordb (RatioMeaning), then each
// system's configuration as it states it.
func Table(w io.Writer, rs []Result) {
	TableFor(w, Config{}, rs)
}

// TableFor is Table with the run's config, which adds a line saying what
// each workload measured.
func TableFor(w io.Writer, cfg Config, rs []Result) {
	sums := Summarize(rs)
	for i, wl := range workloadsOf(sums) {
		if i > 0 {
			fmt.Fprintln(w)
		}
		var of []Summary
		for _, s := range sums {
			if s.Workload == wl {
				of = append(of, s)
			}
		}
		rounds := 0
		for _, s := range of {
			rounds = max(rounds, s.Rounds)
		}
		fmt.Fprintf(w, "%s — %d round(s), the systems alternating in each\n", wl, rounds)
		if cfg.Count > 0 {
			fmt.Fprintf(w, "  %s\n", describe(wl, cfg))
		}
		fmt.Fprintf(w, "  ratio: %s, median of the per-round ratios [min–max]\n", RatioMeaning(wl))
		if wl == "space" {
			fmt.Fprintf(w, "  %-16s %8s %24s %24s %22s %10s %10s\n", "system", "logical", "settled, allocated", "compacted, allocated", "compacted, file sizes", "ratio", "")
			fmt.Fprintf(w, "  %-16s %8s %24s %24s %22s %10s %10s\n", "", "B/rec", "B/rec", "B/rec", "B/rec", "", "")
		} else {
			fmt.Fprintf(w, "  %-16s %10s %24s %10s %10s %10s %9s %8s  %s\n",
				"system", "records", "records/s [min–max]", "p50 µs", "p99 µs", "p99.9 µs", "disk MB", "heap MB", "ratio [min–max]")
		}
		for _, s := range of {
			if s.Skipped != "" && s.Rounds == 0 {
				fmt.Fprintf(w, "  %-16s skipped: %s\n", s.System, s.Skipped)
				continue
			}
			ratio := "-"
			if s.Ratio > 0 {
				ratio = fmt.Sprintf("%.2f [%.2f–%.2f]", s.Ratio, s.RatioMin, s.RatioMax)
			}
			if wl == "space" {
				n := float64(max(1, s.Records))
				rs := "-"
				if s.Ratio > 0 {
					rs = fmt.Sprintf("%.2f [%.2f–%.2f] / %.2f / %.2f", s.Ratio, s.RatioMin, s.RatioMax, s.Ratio2, s.Ratio3)
				}
				fmt.Fprintf(w, "  %-16s %8.0f %24.0f %24.0f %22.0f   %s\n", s.System,
					float64(s.LogicalBytes)/n, float64(s.SettledBytes)/n, float64(s.CompactedBytes)/n, float64(s.CompactedFileBytes)/n, rs)
				continue
			}
			rate := fmt.Sprintf("%.0f [%.0f–%.0f]", s.RecordsSec, s.RecordsSecMin, s.RecordsSecMax)
			fmt.Fprintf(w, "  %-16s %10d %24s %10.0f %10.0f %10.0f %9.1f %8.1f  %s\n",
				s.System, s.Records, rate, s.P50us, s.P99us, s.P999us,
				float64(s.DiskBytes)/(1<<20), s.PeakHeapMB, ratio)
		}
		fmt.Fprintln(w, "  configurations:")
		for _, s := range of {
			if s.Config != "" && !(s.Skipped != "" && s.Rounds == 0) {
				fmt.Fprintf(w, "    %s: %s\n", s.System, s.Config)
			}
		}
	}
}

func workloadsOf(sums []Summary) []string {
	var ws []string
	for _, s := range sums {
		if !slices.Contains(ws, s.Workload) {
			ws = append(ws, s.Workload)
		}
	}
	return ws
}

// WriteAll writes results.json, results.txt and one SVG chart per workload
// into dir, with a header naming this machine and the time of writing.
func WriteAll(dir string, cfg Config, rs []Result) error {
	now := time.Now()
	return WriteAllWith(dir, cfg, Header{Machine: Machine(cfg.Dir), Commit: cfg.Commit, Started: now, Ended: now}, rs)
}

// WriteAllWith is WriteAll with the header given.
func WriteAllWith(dir string, cfg Config, h Header, rs []Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	j, err := json.MarshalIndent(struct {
		Header    Header    `json:"header"`
		Config    Config    `json:"config"`
		Summaries []Summary `json:"summaries"`
		Results   []Result  `json:"results"`
	}{h, cfg, Summarize(rs), rs}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	var t strings.Builder
	h.Lines(&t)
	fmt.Fprintln(&t)
	TableFor(&t, cfg, rs)
	if err := os.WriteFile(filepath.Join(dir, "results.txt"), []byte(t.String()), 0o644); err != nil {
		return err
	}
	sums := Summarize(rs)
	for _, w := range Workloads {
		var of []Summary
		for _, s := range sums {
			if s.Workload == w && s.Rounds > 0 {
				of = append(of, s)
			}
		}
		if len(of) == 0 {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, w+".svg"), []byte(SVG(w, cfg, h, of)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// SVG draws one workload: a bar per system of its median records/s (for
// space: bytes a record, on a log scale, beside the logical bytes), each
// bar labelled with the system, its value and its ratio to anchordb; for
// workloads timed per operation, a panel of p50/p99/p99.9 latency bars on
// a log scale. Workloads of one operation (a whole pass) have no latency
// panel: their percentiles would all be that one time; proof has only the
// latency panel: its records/s counts the appends, not what it measures.
func SVG(workload string, cfg Config, h Header, rs []Summary) string {
	const (
		width, rowH, left = 1100, 34, 140
		panelW            = 330
		gap               = 80
	)
	lines := wrap(describe(workload, cfg), 150)
	lines = append(lines, wrap(fmt.Sprintf("medians of %d round(s), systems alternating; ratio: %s", maxRounds(rs), RatioMeaning(workload)), 150)...)
	if h.Machine != "" {
		lines = append(lines, wrap(h.Machine+" "+h.Commit, 170)...)
	}
	top := 50 + 15*len(lines) + 20
	height := top + rowH*len(rs) + 60
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="10" y="22" font-size="16" font-weight="bold">%s</text>`+"\n", html.EscapeString(workload))
	for i, l := range lines {
		fmt.Fprintf(&b, `<text x="10" y="%d" fill="#555" font-size="11">%s</text>`+"\n", 42+15*i, html.EscapeString(l))
	}
	if workload == "space" {
		spaceBars(&b, rs, left, top, rowH, 2*panelW)
		b.WriteString("</svg>\n")
		return b.String()
	}
	rates := workload != "proof"
	perOp := !slices.Contains(singleOp, workload)
	x1, x2 := left, left+panelW+gap+60
	if !rates {
		x2 = left
	}
	maxRate, maxLat := 0.0, 1.0
	for _, r := range rs {
		maxRate = math.Max(maxRate, r.RecordsSec)
		maxLat = math.Max(maxLat, r.P999us)
	}
	if rates {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">records/s (higher is better)</text>`+"\n", x1, top-8)
	}
	if perOp {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">latency µs, log scale: p50 / p99 / p99.9 (lower is better)</text>`+"\n", x2, top-8)
	}
	colors := []string{"#4c78a8", "#f58518", "#e45756"}
	logMax := math.Log10(maxLat * 1.5)
	for i, r := range rs {
		y := top + i*rowH
		fill := "#9ecae9"
		if r.System == "anchordb" {
			fill = "#2f6fb0"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, y+18, html.EscapeString(r.System))
		if rates {
			w := 0.0
			if maxRate > 0 {
				w = r.RecordsSec / maxRate * panelW
			}
			label := human(r.RecordsSec)
			if r.Ratio > 0 {
				label += fmt.Sprintf("  (ratio %.2f)", r.Ratio)
			}
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="24" fill="%s"><title>%s %.0f records/s</title></rect>`+"\n", x1, y+2, w, fill, html.EscapeString(r.System), r.RecordsSec)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", float64(x1)+w+4, y+18, html.EscapeString(label))
		}
		if !perOp {
			continue
		}
		for k, v := range []float64{r.P50us, r.P99us, r.P999us} {
			lw := 0.0
			if v > 1 {
				lw = math.Log10(v) / logMax * (panelW - 40)
			}
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="7" fill="%s"><title>%s p%s %.0f µs</title></rect>`+"\n",
				x2, y+2+k*8, lw, colors[k], html.EscapeString(r.System), []string{"50", "99", "99.9"}[k], v)
			text := human(v)
			if k == 1 && !rates && r.Ratio > 0 {
				text += fmt.Sprintf("  (ratio %.2f)", r.Ratio)
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="9">%s</text>`+"\n", float64(x2)+lw+3, y+9+k*8, html.EscapeString(text))
		}
	}
	if perOp {
		ly := top + rowH*len(rs) + 20
		for k, name := range []string{"p50", "p99", "p99.9"} {
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
				x2+k*70, ly, colors[k], x2+k*70+14, ly+9, name)
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// wrap breaks s into lines of at most n bytes at spaces.
func wrap(s string, n int) []string {
	var out []string
	for len(s) > n {
		i := strings.LastIndex(s[:n], " ")
		if i <= 0 {
			i = n
		}
		out = append(out, s[:i])
		s = strings.TrimLeft(s[i:], " ")
	}
	return append(out, s)
}

// spaceBars draws the space workload on a log scale: per system three
// bars, bytes a record allocated after settling and after compaction, and
// the files' sizes after compaction, and a line at the logical bytes.
func spaceBars(b *strings.Builder, rs []Summary, x, top, rowH, panelW int) {
	maxB, logical := 1.0, 1.0
	for _, r := range rs {
		n := float64(max(1, r.Records))
		maxB = math.Max(maxB, math.Max(float64(r.SettledBytes), float64(r.CompactedBytes))/n)
		if r.LogicalBytes > 0 {
			logical = float64(r.LogicalBytes) / n
		}
	}
	maxB = math.Max(maxB, logical) * 1.5
	const minB = 10.0
	xs := func(v float64) float64 {
		if v <= minB {
			return 0
		}
		return math.Log(v/minB) / math.Log(maxB/minB) * float64(panelW)
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">bytes on disk a record, log scale (lower is better); the red line: the logical bytes</text>`+"\n", x, top-8)
	names := []string{"settled, allocated", "compacted, allocated", "compacted, file sizes"}
	fills := []string{"#2f6fb0", "#6baed6", "#c6dbef"}
	for i, r := range rs {
		y := top + i*rowH
		n := float64(max(1, r.Records))
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", x-8, y+18, html.EscapeString(r.System))
		for k, v := range []float64{float64(r.SettledBytes) / n, float64(r.CompactedBytes) / n, float64(r.CompactedFileBytes) / n} {
			w := xs(v)
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.1f" height="9" fill="%s"><title>%s %s %.0f bytes a record</title></rect>`+"\n",
				x, y+2+k*10, w, fills[k], html.EscapeString(r.System), names[k], v)
			fmt.Fprintf(b, `<text x="%.1f" y="%d" font-size="9">%.0f B (%s)</text>`+"\n", float64(x)+w+4, y+10+k*10, v, names[k])
		}
		if r.Ratio > 0 {
			fmt.Fprintf(b, `<text x="%d" y="%d" font-size="10">ratio %.2f / %.2f / %.2f</text>`+"\n", x+panelW+170, y+18, r.Ratio, r.Ratio2, r.Ratio3)
		}
	}
	lx := float64(x) + xs(logical)
	fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e45756" stroke-dasharray="4 3"/>`+"\n", lx, top, lx, top+rowH*len(rs))
	fmt.Fprintf(b, `<text x="%.1f" y="%d" fill="#e45756" font-size="10">logical %.0f B</text>`+"\n", lx+3, top+rowH*len(rs)+14, logical)
}

func maxRounds(rs []Summary) int {
	n := 0
	for _, r := range rs {
		n = max(n, r.Rounds)
	}
	return n
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// JSON writes the config, the per-workload summaries and every result as
// one JSON object.
func JSON(w io.Writer, cfg Config, rs []Result) {
	_ = json.NewEncoder(w).Encode(struct {
		Config    Config    `json:"config"`
		Summaries []Summary `json:"summaries"`
		Results   []Result  `json:"results"`
	}{cfg, Summarize(rs), rs})
}
