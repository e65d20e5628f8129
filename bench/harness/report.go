package harness

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// Table writes the results as a text table, with each system's throughput
// as a ratio to anchordb's on the same workload.
func Table(w io.Writer, rs []Result) {
	fmt.Fprintf(w, "%-14s %-16s %10s %12s %10s %10s %10s %10s %9s %s\n",
		"workload", "system", "records", "records/s", "p50 µs", "p99 µs", "p999 µs", "disk MB", "heap MB", "anchordb ÷ system")
	base := map[string]float64{}
	for _, r := range rs {
		if r.System == "anchordb" && r.Skipped == "" {
			base[r.Workload] = r.RecordsSec
		}
	}
	for _, r := range rs {
		if r.Skipped != "" {
			fmt.Fprintf(w, "%-14s %-16s skipped: %s\n", r.Workload, r.System, r.Skipped)
			continue
		}
		ratio := "-"
		if b := base[r.Workload]; b > 0 && r.System != "anchordb" {
			ratio = fmt.Sprintf("%.2f×", b/r.RecordsSec)
		}
		fmt.Fprintf(w, "%-14s %-16s %10d %12.0f %10.0f %10.0f %10.0f %10.1f %9.1f %s\n",
			r.Workload, r.System, r.Records, r.RecordsSec, r.P50us, r.P99us, r.P999us,
			float64(r.DiskBytes)/(1<<20), r.PeakHeapMB, ratio)
	}
}

// WriteAll writes results.json, results.txt and one SVG chart per workload
// into dir.
func WriteAll(dir string, cfg Config, rs []Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	j, err := json.MarshalIndent(struct {
		Config  Config   `json:"config"`
		Results []Result `json:"results"`
	}{cfg, rs}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	var t strings.Builder
	Table(&t, rs)
	if err := os.WriteFile(filepath.Join(dir, "results.txt"), []byte(t.String()), 0o644); err != nil {
		return err
	}
	for _, w := range Workloads {
		var of []Result
		for _, r := range rs {
			if r.Workload == w && r.Skipped == "" {
				of = append(of, r)
			}
		}
		if len(of) == 0 {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, w+".svg"), []byte(SVG(w, cfg, of)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// SVG draws one workload: throughput bars per system on the left, latency
// p50/p99/p999 bars (log scale) per system on the right, values on the bars.
func SVG(workload string, cfg Config, rs []Result) string {
	const (
		width, rowH, top, left = 960, 34, 70, 130
		panelW                 = 330
		gap                    = 60
	)
	height := top + rowH*len(rs) + 60
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="10" y="22" font-size="16" font-weight="bold">%s</text>`+"\n", html.EscapeString(workload))
	fmt.Fprintf(&b, `<text x="10" y="42" fill="#555">%d records, %d-byte values, %d writers (batch %d); every acknowledgement durable except nosync</text>`+"\n",
		cfg.Count, cfg.ValueSize, writersOf(workload, cfg), cfg.BatchSize)
	maxRate := 0.0
	maxLat := 1.0
	for _, r := range rs {
		maxRate = math.Max(maxRate, r.RecordsSec)
		maxLat = math.Max(maxLat, r.P999us)
	}
	x1 := left
	x2 := left + panelW + gap + 40
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">records/s (higher is better)</text>`+"\n", x1, top-10)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">latency µs, log scale: p50 / p99 / p999 (lower is better)</text>`+"\n", x2, top-10)
	colors := []string{"#4c78a8", "#f58518", "#e45756"}
	logMax := math.Log10(maxLat * 1.5)
	for i, r := range rs {
		y := top + i*rowH
		fill := "#9ecae9"
		if r.System == "anchordb" {
			fill = "#2f6fb0"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, y+18, html.EscapeString(r.System))
		w := 0.0
		if maxRate > 0 {
			w = r.RecordsSec / maxRate * panelW
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="24" fill="%s"/>`+"\n", x1, y+2, w, fill)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", float64(x1)+w+4, y+18, human(r.RecordsSec))
		for k, v := range []float64{r.P50us, r.P99us, r.P999us} {
			lw := 0.0
			if v > 1 {
				lw = math.Log10(v) / logMax * (panelW - 40)
			}
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="7" fill="%s"><title>%s p%s %.0f µs</title></rect>`+"\n",
				x2, y+2+k*8, lw, colors[k], html.EscapeString(r.System), []string{"50", "99", "99.9"}[k], v)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="9">%s</text>`+"\n", float64(x2)+lw+3, y+9+k*8, human(v))
		}
	}
	ly := top + rowH*len(rs) + 20
	for k, name := range []string{"p50", "p99", "p99.9"} {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			x2+k*70, ly, colors[k], x2+k*70+14, ly+9, name)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func writersOf(workload string, cfg Config) int {
	if workload == "sync-append" {
		return cfg.Writers
	}
	return 1
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

// JSON writes the config and results as one JSON object.
func JSON(w io.Writer, cfg Config, rs []Result) {
	_ = json.NewEncoder(w).Encode(struct {
		Config  Config   `json:"config"`
		Results []Result `json:"results"`
	}{cfg, rs})
}
