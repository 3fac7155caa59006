package engine

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"
)

// progressBar reports long work (loading weights, capturing graphs): a bar redrawn in place on
// a terminal, a log line at each quarter otherwise (at most four lines). The loader reports
// after every tensor and may report the total more than once (its count is clamped, and Done
// reports it again), so each quarter and the end are reported once: a log read by a person or a
// host should not grow with the number of tensors.
type progressBar struct {
	what     string
	term     io.Writer // nil when stderr is not a terminal
	log      *slog.Logger
	start    time.Time
	quarter  int64
	drawn    time.Time
	finished bool
}

func newProgressBar(what string, log *slog.Logger) *progressBar {
	var term io.Writer
	if st, err := os.Stderr.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		term = os.Stderr
	}
	return newProgressBarTo(what, term, log)
}

// newProgressBarTo draws on term, or logs to log when term is nil.
func newProgressBarTo(what string, term io.Writer, log *slog.Logger) *progressBar {
	return &progressBar{what: what, term: term, log: log, start: time.Now()}
}

// update is called with the work done so far and the total.
func (p *progressBar) update(done, total int64) {
	if total <= 0 || p.finished {
		return
	}
	done = min(done, total)
	p.finished = done == total
	if p.term != nil {
		// Redraws are bounded too: a terminal log (script, CI with a tty) keeps every one.
		if !p.finished && time.Since(p.drawn) < 100*time.Millisecond {
			return
		}
		p.drawn = time.Now()
		const width = 30
		n := int(width * done / total)
		fmt.Fprintf(p.term, "\r%s [%s%s] %3d%% %s", p.what, strings.Repeat("=", n), strings.Repeat(" ", width-n),
			100*done/total, time.Since(p.start).Round(100*time.Millisecond))
		if p.finished {
			fmt.Fprintln(p.term)
		}
		return
	}
	if q := 4 * done / total; q > p.quarter {
		p.quarter = q
		p.log.Info(p.what, "percent", 100*done/total, "elapsed", time.Since(p.start).Round(time.Millisecond))
	}
}
