package harness

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// RatioRow is one row of the Go suite's paired-ratio table, as
// bench/ratios.sh prints it with `report -tsv`.
type RatioRow struct {
	Chart          string // the chart the row is drawn in
	Label          string
	Engine, Peer   string // the benchmarks
	Unit           string
	EngineValue    float64 // the medians over the samples
	PeerValue      float64
	Ratio          float64 // the median of the per-sample ratios
	RatioMin       float64
	RatioMax       float64
	Samples        int
	Target, Result string // Target: "1.0", "<1.2" or "-"
}

// ParseRatioRows reads `ratios.sh report -tsv` output: header lines
// ("#\t…", returned in order) and rows. A row without data has "-" for its
// numbers, parsed as 0.
func ParseRatioRows(r io.Reader) (header []string, rows []RatioRow, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		f := strings.Split(sc.Text(), "\t")
		if len(f) == 0 || f[0] == "" {
			continue
		}
		if f[0] == "#" {
			header = append(header, strings.Join(f[1:], "\t"))
			continue
		}
		if len(f) != 13 {
			return header, rows, fmt.Errorf("ratio rows: line %d has %d fields, want 13", line, len(f))
		}
		num := func(s string) (float64, error) {
			if s == "-" {
				return 0, nil
			}
			return strconv.ParseFloat(s, 64)
		}
		row := RatioRow{Chart: f[0], Label: strings.TrimSpace(f[1]), Engine: f[2], Peer: f[3], Unit: f[4], Target: f[11], Result: f[12]}
		var errs [6]error
		row.EngineValue, errs[0] = num(f[5])
		row.PeerValue, errs[1] = num(f[6])
		row.Ratio, errs[2] = num(f[7])
		row.RatioMin, errs[3] = num(f[8])
		row.RatioMax, errs[4] = num(f[9])
		row.Samples, errs[5] = strconv.Atoi(f[10])
		for _, e := range errs {
			if e != nil {
				return header, rows, fmt.Errorf("ratio rows: line %d: %w", line, e)
			}
		}
		rows = append(rows, row)
	}
	return header, rows, sc.Err()
}

// chartTitles names the Go suite's charts.
var chartTitles = map[string]string{
	"targets": "Go suite: anchordb against its peers, the targets",
	"load":    "Go suite: Get latency under 64 durable writers",
	"sweeps":  "Go suite: durable appends, writers and value size swept",
	"steady":  "Go suite: 10M records a side, to quiescence",
}

// WriteRatioCharts writes one SVG per chart of rows into dir:
// go-<chart>.svg.
func WriteRatioCharts(dir string, header []string, rows []RatioRow) error {
	by := map[string][]RatioRow{}
	var order []string
	for _, r := range rows {
		if _, ok := by[r.Chart]; !ok {
			order = append(order, r.Chart)
		}
		by[r.Chart] = append(by[r.Chart], r)
	}
	for _, c := range order {
		title := chartTitles[c]
		if title == "" {
			title = "Go suite: " + c
		}
		if err := os.WriteFile(filepath.Join(dir, "go-"+c+".svg"), []byte(RatioChart(title, header, by[c])), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// RatioChart draws rows: per row its label and unit, the engine's and the
// peer's medians as two bars on the row's own scale (the rows have
// different units) with their values, and on a shared log scale the
// median ratio as a dot with its min–max whisker, the target as a red
// tick, and the ratio and result written out.
func RatioChart(title string, header []string, rows []RatioRow) string {
	const (
		width, rowH, left = 1400, 30, 330
		barW              = 260
		ratioX            = left + barW + 190
		ratioW            = 330
		loR, hiR          = 0.05, 20.0
	)
	top := 84 + 14*len(header)
	height := top + rowH*len(rows) + 50
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="10" y="22" font-size="16" font-weight="bold">%s</text>`+"\n", html.EscapeString(title))
	for i, h := range header {
		fmt.Fprintf(&b, `<text x="10" y="%d" fill="#666" font-size="10">%s</text>`+"\n", 40+14*i, html.EscapeString(h))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">medians: engine (dark), reference (light)</text>`+"\n", left, top-24)
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#666" font-size="10">each row to its own scale</text>`+"\n", left, top-10)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">engine ÷ reference, per sample (log scale)</text>`+"\n", ratioX, top-24)
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#666" font-size="10">dot: median; line: min–max; red: the target</text>`+"\n", ratioX, top-10)
	xr := func(r float64) float64 {
		r = math.Min(math.Max(r, loR), hiR)
		return float64(ratioX) + math.Log(r/loR)/math.Log(hiR/loR)*ratioW
	}
	for _, t := range []float64{0.1, 0.5, 1, 2, 10} {
		x := xr(t)
		color := "#ddd"
		if t == 1 {
			color = "#888"
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x, top-4, x, top+rowH*len(rows), color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#888">%g</text>`+"\n", x, top+rowH*len(rows)+14, t)
	}
	for i, r := range rows {
		y := top + i*rowH
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, y+12, html.EscapeString(r.Label))
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" fill="#888" font-size="9">%s</text>`+"\n", left-8, y+23, html.EscapeString(r.Unit))
		m := math.Max(r.EngineValue, r.PeerValue)
		for k, v := range []float64{r.EngineValue, r.PeerValue} {
			w := 0.0
			if m > 0 {
				w = v / m * barW
			}
			fill := []string{"#2f6fb0", "#9ecae9"}[k]
			who := []string{"engine", "peer"}[k]
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="11" fill="%s"><title>%s %s %g %s</title></rect>`+"\n",
				left, y+2+k*12, w, fill, html.EscapeString(r.Label), who, v, html.EscapeString(r.Unit))
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="9">%s</text>`+"\n", float64(left)+w+3, y+11+k*12, human(v))
		}
		if r.Samples == 0 {
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#c00">no data</text>`+"\n", ratioX, y+16)
			continue
		}
		cy := y + 14
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`+"\n", xr(r.RatioMin), cy, xr(r.RatioMax), cy)
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%d" r="4" fill="#2f6fb0"><title>%s: %.2f [%.2f–%.2f], %d samples</title></circle>`+"\n",
			xr(r.Ratio), cy, html.EscapeString(r.Label), r.Ratio, r.RatioMin, r.RatioMax, r.Samples)
		target := ""
		if t := strings.TrimPrefix(r.Target, "<"); r.Target != "-" && r.Target != "" {
			if v, err := strconv.ParseFloat(t, 64); err == nil {
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e45756" stroke-width="2"/>`+"\n", xr(v), y+4, xr(v), y+24)
				op := "≥"
				if strings.HasPrefix(r.Target, "<") {
					op = "≤"
				}
				target = fmt.Sprintf(", target %s %s", op, t)
			}
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d">%.2f [%.2f–%.2f]%s: %s</text>`+"\n", ratioX+ratioW+12, cy+4,
			r.Ratio, r.RatioMin, r.RatioMax, html.EscapeString(target), html.EscapeString(r.Result))
	}
	b.WriteString("</svg>\n")
	return b.String()
}
