package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func fullResult() *Result {
	hf := &HFResult{Transformers: "4.46", TTFTMs: 180}
	hf.Decode1.TPOTMs, hf.Decode1.TokensPerS = 30, 33.3
	hf.Throughput = append(hf.Throughput, struct {
		Concurrency int     `json:"concurrency"`
		WallSeconds float64 `json:"wall_s"`
		TokensPerS  float64 `json:"output_tokens_per_s"`
	}{1, 8, 32}, struct {
		Concurrency int     `json:"concurrency"`
		WallSeconds float64 `json:"wall_s"`
		TokensPerS  float64 `json:"output_tokens_per_s"`
	}{16, 12, 340})
	return &Result{Date: "2025-01-02 03:04 UTC", GPU: "NVIDIA H100 80GB HBM3", Commit: "abc1234", Model: "/models/Qwen3-8B",
		Decode1: DecodeRow{TPOTMs: 7.1, TokensPerS: 140.8, FloorTokensPerS: 190, Pct: 74},
		TTFT:    TTFTRow{Tokens: 1024, Ms: 62, FloorMs: 31, TFLOPs: 270, PctGemm: 40},
		Throughput: []ThroughputRow{
			{Concurrency: 1, TokensPerS: 140, FloorTokensPerS: 190, Pct: 73.7, Bound: "memory"},
			{Concurrency: 16, TokensPerS: 2100, FloorTokensPerS: 2900, Pct: 72.4, Bound: "memory"},
			{Concurrency: 64, TokensPerS: 6800, FloorTokensPerS: 10500, Pct: 64.8, Bound: "memory"},
			{Concurrency: 256, TokensPerS: 14000, FloorTokensPerS: 26000, Pct: 53.8, Bound: "compute"},
		},
		HF: hf}
}

// checkSVG parses the plot as XML to the end and returns the count of atom-go throughput points.
func checkSVG(t *testing.T, out []byte) int {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(out))
	root, points := "", 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		se, isStart := tok.(xml.StartElement)
		if !isStart {
			continue
		}
		if root == "" {
			root = se.Name.Local
		}
		if se.Name.Local != "circle" {
			continue
		}
		for _, a := range se.Attr {
			if a.Name.Local == "class" && a.Value == "atom-tput" {
				points++
			}
		}
	}
	require.Equal(t, "svg", root)
	s := string(out)
	require.NotContains(t, s, "NaN")
	require.NotContains(t, s, "Inf")
	require.NotContains(t, s, "<script")
	return points
}

func TestWritePlot(t *testing.T) {
	noHF := fullResult()
	noHF.HF, noHF.Throughput, noHF.Model = nil, nil, "tiny-llama"

	bad := fullResult()
	bad.Model = `evil<script>&"`
	bad.GPU = "GPU </svg>"
	bad.Throughput = []ThroughputRow{
		{Concurrency: 1, TokensPerS: math.NaN(), FloorTokensPerS: 190},
		{Concurrency: 4, TokensPerS: 0, FloorTokensPerS: 500},
		{Concurrency: 8, TokensPerS: -5, FloorTokensPerS: math.Inf(1)},
		{Concurrency: 0, TokensPerS: 100, FloorTokensPerS: 100},
		{Concurrency: 16, TokensPerS: 900, FloorTokensPerS: math.NaN(), Pct: math.Inf(-1)},
	}
	bad.Decode1 = DecodeRow{TPOTMs: math.Inf(1), FloorTokensPerS: 0, Pct: math.NaN()}
	bad.TTFT = TTFTRow{Ms: -3, FloorMs: math.NaN()}
	bad.HF.TTFTMs, bad.HF.Decode1.TPOTMs = math.NaN(), -1
	bad.HF.Throughput[0].TokensPerS = math.Inf(1)

	single := fullResult()
	single.HF = nil
	single.Throughput = single.Throughput[2:3]

	for _, tc := range []struct {
		name   string
		r      *Result
		points int
		want   []string // escaped text the plot must hold
	}{
		{"full", fullResult(), 4, []string{"/models/Qwen3-8B", "commit abc1234", "transformers", "74%", "54%"}},
		{"no HF, no throughput", noHF, 0, []string{"tiny-llama", "no data", "TTFT, 1024-token prompt"}},
		{"invalid values", bad, 1, []string{"evil&lt;script&gt;&amp;&#34;", "GPU &lt;/svg&gt;"}},
		{"single point", single, 1, []string{"65%"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			require.NoError(t, writePlot(&b, tc.r))
			require.Equal(t, tc.points, checkSVG(t, b.Bytes()))
			for _, w := range tc.want {
				require.Contains(t, b.String(), w)
			}
		})
	}
}

func TestNiceTicks(t *testing.T) {
	for _, tc := range []struct {
		top       float64
		end, step float64
	}{
		{top: 15680, end: 20000, step: 5000},
		{top: 7.9, end: 8, step: 2},
		{top: 0.31, end: 0.4, step: 0.1},
		{top: 0, end: 4, step: 1},
		{top: math.NaN(), end: 4, step: 1},
	} {
		ticks, end, step := niceTicks(tc.top, 4)
		require.InDelta(t, tc.end, end, 1e-9, "top %v", tc.top)
		require.InDelta(t, tc.step, step, 1e-9, "top %v", tc.top)
		require.InDelta(t, 0, ticks[0], 0)
		require.InDelta(t, end, ticks[len(ticks)-1], 1e-9)
	}
	require.Equal(t, "15k", tickLabel(15000, 5000))
	require.Equal(t, "0.3", tickLabel(0.3, 0.1))
}

func TestSVGPath(t *testing.T) {
	require.Equal(t, "out/bench.svg", svgPath("out/bench.json"))
	require.Equal(t, "bench.svg", svgPath("bench"))
	require.Equal(t, "a.v1/bench.svg", svgPath("a.v1/bench.json"))
	require.Equal(t, "x.svg.svg", svgPath("x.svg"))
}

// bench --plot reads saved results and writes the plot beside them.
func TestPlotFlag(t *testing.T) {
	dir := t.TempDir()
	js := filepath.Join(dir, "bench.json")
	require.NoError(t, writeJSON(js, fullResult()))
	require.NoError(t, run([]string{"--plot", js}))
	out, err := os.ReadFile(filepath.Join(dir, "bench.svg"))
	require.NoError(t, err)
	require.Equal(t, 4, checkSVG(t, out))

	p, err := plotJSON(js)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "bench.svg"), p)
	require.True(t, strings.HasPrefix(string(out), "<svg"))

	_, err = plotJSON(filepath.Join(dir, "missing.json"))
	require.Error(t, err)
}
