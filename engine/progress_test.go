package engine

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProgressBarBoundsItsOutput: a load with many updates (one per tensor, the total reported
// many times over as the loader clamps its count, then again by Done) writes at most four log
// lines without a terminal, and one line, redrawn with \r, on a terminal.
func TestProgressBarBoundsItsOutput(t *testing.T) {
	const total = 1000
	updates := func(p *progressBar) {
		for done := int64(0); done <= total+500; done += 7 {
			p.update(done, total)
		}
		p.update(total, total)
	}
	for _, tc := range []struct {
		name     string
		terminal bool
		lines    []string // what each line holds, in order
	}{
		{"log", false, []string{"percent=25", "percent=50", "percent=75", "percent=100"}},
		{"terminal", true, []string{"100%"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			var p *progressBar
			if tc.terminal {
				p = newProgressBarTo("loading weights", &out, nil)
			} else {
				p = newProgressBarTo("loading weights", nil, slog.New(slog.NewTextHandler(&out, nil)))
			}
			updates(p)
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			require.Len(t, lines, len(tc.lines), "%q", out.String())
			for i, want := range tc.lines {
				require.Contains(t, lines[i], "loading weights")
				require.Contains(t, lines[i], want)
			}
			if tc.terminal {
				require.True(t, strings.HasPrefix(out.String(), "\r"), "redrawn in place")
				last := lines[0][strings.LastIndex(lines[0], "\r"):]
				require.Contains(t, last, "[==============================] 100%", "the last redraw is the full bar")
			}
		})
	}
}
