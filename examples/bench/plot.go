package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// The plot is one fixed-size SVG: three panels side by side, a title above and a legend below.
const (
	plotW, plotH  = 960.0, 420.0
	panelW        = plotW / 3
	padL, padR    = 62.0, 14.0 // inside a panel: room for the y tick labels on the left
	padT, padB    = 62.0, 70.0 // room for the panel title above, tick labels and axis title below
	colAtom       = "#1f77b4"
	colRoof       = "#555555"
	colHF         = "#ff7f0e"
	maxTitleRunes = 120
)

// svgPath is where the plot of the results at jsonPath goes: the same path with .svg for its
// extension, so bench.json and bench.svg sit side by side.
func svgPath(jsonPath string) string {
	p := strings.TrimSuffix(jsonPath, filepath.Ext(jsonPath)) + ".svg"
	if p == jsonPath { // results named *.svg: never overwrite them with their plot
		p += ".svg"
	}
	return p
}

// writePlotFile writes the plot of r beside jsonPath and returns the plot's path.
func writePlotFile(jsonPath string, r *Result) (string, error) {
	var b bytes.Buffer
	if err := writePlot(&b, r); err != nil {
		return "", err
	}
	p := svgPath(jsonPath)
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	return p, nil
}

// plotJSON plots results saved earlier (bench --plot), so old runs get a plot without a GPU.
func plotJSON(jsonPath string) (string, error) {
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		return "", fmt.Errorf("read results: %w", err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return "", fmt.Errorf("parse %s: %w", jsonPath, err)
	}
	return writePlotFile(jsonPath, &r)
}

// ok says whether a measured value can be plotted: results cut short or hand-edited hold zeros,
// negatives and non-finite values, and the bounds keep every scale's arithmetic finite.
func ok(v float64) bool { return v >= 1e-9 && v <= 1e15 }

// num formats a coordinate; a non-finite value would make the SVG invalid, so it becomes 0.
func num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "0"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// esc escapes untrusted text (model paths, GPU names) for character data and attributes.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder never fails
	return b.String()
}

// pct formats a percentage of the roofline, or "" when either side is missing.
func pct(floor, measured float64) string {
	if !ok(floor) || !ok(measured) {
		return ""
	}
	p := 100 * floor / measured
	if p < 10 {
		return strconv.FormatFloat(p, 'f', 1, 64) + "%"
	}
	return strconv.FormatFloat(p, 'f', 0, 64) + "%"
}

// niceTicks covers [0, top] with about n steps of 1, 2 or 5 times a power of ten, so the labels
// read as round numbers.
func niceTicks(top float64, n int) (ticks []float64, end, step float64) {
	step = 1
	valid := top > 0 && !math.IsInf(top, 0) // NaN fails the comparison
	if valid {
		raw := top / float64(n)
		mag := math.Pow(10, math.Floor(math.Log10(raw)))
		step = 10 * mag
		for _, m := range []float64{1, 2, 5} {
			if raw <= m*mag {
				step = m * mag
				break
			}
		}
		if !(step > 0) || math.IsInf(step, 0) {
			step = 1
		}
	}
	k := max(1, int(math.Ceil(top/step-1e-9)))
	if !valid {
		k = n
	}
	for i := 0; i <= k; i++ {
		ticks = append(ticks, float64(i)*step)
	}
	return ticks, float64(k) * step, step
}

// tickLabel prints a tick with as many decimals as its step needs; thousands get a k so the
// labels fit the left margin.
func tickLabel(v, step float64) string {
	suffix := ""
	if step >= 1000 {
		v, step, suffix = v/1000, step/1000, "k"
	}
	if v == 0 { // "0k" reads oddly at the origin
		return "0"
	}
	dec := 0
	if step < 1 {
		dec = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	return strconv.FormatFloat(v, 'f', dec, 64) + suffix
}

// svg collects the document; elements are written whole, so Fprintf's errors cannot occur.
type svg struct{ bytes.Buffer }

func (s *svg) text(x, y float64, anchor, attrs, body string) {
	fmt.Fprintf(&s.Buffer, `<text x="%s" y="%s" text-anchor="%s"%s>%s</text>`+"\n", num(x), num(y), anchor, attrs, esc(body))
}

func (s *svg) line(x1, y1, x2, y2 float64, attrs string) {
	fmt.Fprintf(&s.Buffer, `<line x1="%s" y1="%s" x2="%s" y2="%s" %s/>`+"\n", num(x1), num(y1), num(x2), num(y2), attrs)
}

// frame is one panel's plot area and its linear y scale from 0.
type frame struct {
	x0, y0, x1, y1 float64 // plot area: left, top, right, bottom
	top            float64 // the value at y0
}

func newFrame(panel int) frame {
	x := float64(panel) * panelW
	return frame{x0: x + padL, y0: padT, x1: x + panelW - padR, y1: plotH - padB, top: 1}
}

func (f frame) y(v float64) float64 { return f.y1 - (f.y1-f.y0)*v/f.top }

// axes draws the panel title, the y axis with its ticks and grid, and the y axis title.
func (s *svg) axes(f *frame, title, yTitle string, maxVal float64) {
	s.text((f.x0+f.x1)/2, padT-26, "middle", ` font-size="13" font-weight="bold"`, title)
	ticks, end, step := niceTicks(maxVal*1.12, 4) // headroom for the labels above the data
	f.top = end
	for _, t := range ticks {
		y := f.y(t)
		s.line(f.x0, y, f.x1, y, `stroke="#e4e4e4"`)
		s.text(f.x0-5, y+4, "end", "", tickLabel(t, step))
	}
	s.line(f.x0, f.y0, f.x0, f.y1, `stroke="#000"`)
	s.line(f.x0, f.y1, f.x1, f.y1, `stroke="#000"`)
	cy := (f.y0 + f.y1) / 2
	s.text(f.x0-46, cy, "middle", fmt.Sprintf(` transform="rotate(-90 %s %s)"`, num(f.x0-46), num(cy)), yTitle)
}

func (s *svg) noData(f frame) {
	s.text((f.x0+f.x1)/2, (f.y0+f.y1)/2, "middle", ` fill="#888"`, "no data")
}

// point is one measurement of a throughput series.
type point struct {
	conc  int
	v     float64
	label string
}

// series keeps the rows whose concurrency and value can be plotted, in concurrency order.
func series(n int, at func(int) (int, float64, string)) []point {
	var ps []point
	for i := 0; i < n; i++ {
		c, v, l := at(i)
		if c > 0 && ok(v) {
			ps = append(ps, point{c, v, l})
		}
	}
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].conc < ps[j].conc })
	return ps
}

// throughputPanel plots output tokens/s against concurrency on a log2 axis: atom-go, the
// roofline (dashed) and transformers where it ran.
func (s *svg) throughputPanel(r *Result) {
	f := newFrame(0)
	atom := series(len(r.Throughput), func(i int) (int, float64, string) {
		t := r.Throughput[i]
		l := pct(t.TokensPerS, t.FloorTokensPerS)
		if l == "" && ok(t.Pct) { // no floor saved: the percentage recorded with the run
			l = pct(t.Pct, 100)
		}
		return t.Concurrency, t.TokensPerS, l
	})
	roof := series(len(r.Throughput), func(i int) (int, float64, string) {
		return r.Throughput[i].Concurrency, r.Throughput[i].FloorTokensPerS, ""
	})
	var hf []point
	if r.HF != nil {
		hf = series(len(r.HF.Throughput), func(i int) (int, float64, string) {
			return r.HF.Throughput[i].Concurrency, r.HF.Throughput[i].TokensPerS, ""
		})
	}
	all := append(append(append([]point(nil), atom...), roof...), hf...)
	maxV := 0.0
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range all {
		maxV = max(maxV, p.v)
		lo, hi = min(lo, math.Log2(float64(p.conc))), max(hi, math.Log2(float64(p.conc)))
	}
	s.axes(&f, "Throughput vs concurrency", "output tokens/s", maxV)
	s.text((f.x0+f.x1)/2, f.y1+34, "middle", "", "concurrent requests (log2)")
	if len(all) == 0 {
		s.noData(f)
		return
	}
	lo, hi = lo-0.4, hi+0.4 // keep the end points off the frame; a single point gets a range
	x := func(c int) float64 { return f.x0 + (f.x1-f.x0)*(math.Log2(float64(c))-lo)/(hi-lo) }
	concs := map[int]bool{}
	for _, p := range all {
		concs[p.conc] = true
	}
	ticks := make([]int, 0, len(concs))
	for c := range concs {
		ticks = append(ticks, c)
	}
	sort.Ints(ticks)
	last := math.Inf(-1)
	for _, c := range ticks {
		if x(c)-last < 24 { // too close to the previous label to read
			continue
		}
		last = x(c)
		s.line(x(c), f.y1, x(c), f.y1+4, `stroke="#000"`)
		s.text(x(c), f.y1+16, "middle", "", strconv.Itoa(c))
	}
	draw := func(ps []point, color, class, dash string) {
		if len(ps) > 1 {
			var pts []string
			for _, p := range ps {
				pts = append(pts, num(x(p.conc))+","+num(f.y(p.v)))
			}
			fmt.Fprintf(&s.Buffer, `<polyline class="%s-line" points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n",
				class, strings.Join(pts, " "), color, dash)
		}
		for _, p := range ps {
			fmt.Fprintf(&s.Buffer, `<circle class="%s" cx="%s" cy="%s" r="3.5" fill="%s"/>`+"\n", class, num(x(p.conc)), num(f.y(p.v)), color)
			if p.label != "" {
				s.text(x(p.conc), f.y(p.v)-8, "middle", ` font-size="10" stroke="#fff" stroke-width="3" paint-order="stroke" fill="`+color+`"`, p.label)
			}
		}
	}
	draw(roof, colRoof, "roof-tput", ` stroke-dasharray="6 4"`)
	draw(hf, colHF, "hf-tput", "")
	draw(atom, colAtom, "atom-tput", "")
}

// bar is one measurement of a bar panel.
type bar struct {
	name, color, note string
	v                 float64
	roof              bool // the floor: drawn as a dashed outline
}

// barPanel draws milliseconds as bars, each labelled with its value and its note.
func (s *svg) barPanel(panel int, title, yTitle string, bars []bar) {
	f := newFrame(panel)
	var keep []bar
	maxV := 0.0
	for _, b := range bars {
		if ok(b.v) {
			keep = append(keep, b)
			maxV = max(maxV, b.v)
		}
	}
	s.axes(&f, title, yTitle, maxV)
	if len(keep) == 0 {
		s.noData(f)
		return
	}
	slot := (f.x1 - f.x0) / float64(len(keep))
	w := min(slot*0.6, 56)
	for i, b := range keep {
		cx := f.x0 + slot*(float64(i)+0.5)
		y := f.y(b.v)
		style := fmt.Sprintf(`fill="%s"`, b.color)
		if b.roof {
			style = fmt.Sprintf(`fill="#f2f2f2" stroke="%s" stroke-width="1.5" stroke-dasharray="5 3"`, b.color)
		}
		fmt.Fprintf(&s.Buffer, `<rect class="bar" x="%s" y="%s" width="%s" height="%s" %s/>`+"\n", num(cx-w/2), num(y), num(w), num(f.y1-y), style)
		s.text(cx, y-5, "middle", ` font-size="10"`, strconv.FormatFloat(b.v, 'g', 3, 64)+" ms")
		if b.note != "" {
			s.text(cx, y-17, "middle", ` font-size="10" fill="`+b.color+`"`, b.note)
		}
		s.text(cx, f.y1+16, "middle", "", b.name)
	}
}

// legend names the series once for all three panels.
func (s *svg) legend(hf bool) {
	type entry struct{ name, color, dash string }
	es := []entry{{"atom-go", colAtom, ""}, {"roofline (floor)", colRoof, ` stroke-dasharray="6 4"`}}
	if hf {
		es = append(es, entry{"transformers", colHF, ""})
	}
	x := plotW/2 - float64(len(es))*70
	for _, e := range es {
		s.line(x, plotH-18, x+24, plotH-18, fmt.Sprintf(`stroke="%s" stroke-width="2"%s`, e.color, e.dash))
		s.text(x+30, plotH-14, "start", "", e.name)
		x += 140
	}
}

// title is the run's identity: model, GPU, commit and date, the empty ones left out.
func title(r *Result) string {
	var parts []string
	for _, p := range []string{r.Model, r.GPU} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if r.Commit != "" {
		parts = append(parts, "commit "+r.Commit)
	}
	if r.Date != "" {
		parts = append(parts, r.Date)
	}
	t := "atom-go bench"
	if len(parts) > 0 {
		t += ": " + strings.Join(parts, ", ")
	}
	if rs := []rune(t); len(rs) > maxTitleRunes { // a long checkpoint path would run off the image
		t = string(rs[:maxTitleRunes-1]) + "…"
	}
	return t
}

// writePlot renders r as one self-contained SVG: throughput against concurrency, batch-1 time
// per output token and time to first token, each against its roofline.
func writePlot(w io.Writer, r *Result) error {
	if r == nil {
		return fmt.Errorf("plot: no results")
	}
	var s svg
	fmt.Fprintf(&s.Buffer, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="sans-serif" font-size="11">`+"\n",
		num(plotW), num(plotH), num(plotW), num(plotH))
	fmt.Fprintf(&s.Buffer, `<rect x="0" y="0" width="%s" height="%s" fill="#fff"/>`+"\n", num(plotW), num(plotH))
	s.text(plotW/2, 20, "middle", ` font-size="13"`, title(r))
	s.throughputPanel(r)

	roofTPOT := 0.0
	if ok(r.Decode1.FloorTokensPerS) {
		roofTPOT = 1000 / r.Decode1.FloorTokensPerS
	}
	var hfTPOT, hfTTFT float64
	if r.HF != nil {
		hfTPOT, hfTTFT = r.HF.Decode1.TPOTMs, r.HF.TTFTMs
	}
	atomNote := pct(roofTPOT, r.Decode1.TPOTMs)
	if atomNote == "" && ok(r.Decode1.Pct) {
		atomNote = pct(r.Decode1.Pct, 100)
	}
	of := func(p string) string {
		if p == "" {
			return ""
		}
		return p + " of roofline"
	}
	s.barPanel(1, "Batch-1 decode", "ms per output token", []bar{
		{name: "atom-go", color: colAtom, note: of(atomNote), v: r.Decode1.TPOTMs},
		{name: "roofline", color: colRoof, v: roofTPOT, roof: true},
		{name: "transformers", color: colHF, note: of(pct(roofTPOT, hfTPOT)), v: hfTPOT},
	})
	ttft := "TTFT"
	if r.TTFT.Tokens > 0 {
		ttft = fmt.Sprintf("TTFT, %d-token prompt", r.TTFT.Tokens)
	}
	s.barPanel(2, ttft, "ms to first token", []bar{
		{name: "atom-go", color: colAtom, note: of(pct(r.TTFT.FloorMs, r.TTFT.Ms)), v: r.TTFT.Ms},
		{name: "roofline", color: colRoof, v: r.TTFT.FloorMs, roof: true},
		{name: "transformers", color: colHF, note: of(pct(r.TTFT.FloorMs, hfTTFT)), v: hfTTFT},
	})
	s.legend(r.HF != nil)
	s.WriteString("</svg>\n")
	_, err := w.Write(s.Bytes())
	return err
}
