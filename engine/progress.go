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
// a terminal, plain log lines at every quarter otherwise.
type progressBar struct {
	what    string
	term    io.Writer // nil when stderr is not a terminal
	log     *slog.Logger
	start   time.Time
	quarter int64
	drawn   time.Time
}

func newProgressBar(what string, log *slog.Logger) *progressBar {
	p := &progressBar{what: what, log: log, start: time.Now()}
	if st, err := os.Stderr.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		p.term = os.Stderr
	}
	return p
}

// update is called with the work done so far and the total.
func (p *progressBar) update(done, total int64) {
	if total <= 0 {
		return
	}
	if p.term != nil {
		if done < total && time.Since(p.drawn) < 50*time.Millisecond {
			return
		}
		p.drawn = time.Now()
		const width = 30
		n := int(width * done / total)
		fmt.Fprintf(p.term, "\r%s [%s%s] %3d%% %s", p.what, strings.Repeat("=", n), strings.Repeat(" ", width-n),
			100*done/total, time.Since(p.start).Round(100*time.Millisecond))
		if done >= total {
			fmt.Fprintln(p.term)
		}
		return
	}
	if q := 4 * done / total; q > p.quarter || done >= total {
		p.quarter = q
		p.log.Info(p.what, "percent", 100*done/total, "elapsed", time.Since(p.start).Round(time.Millisecond))
	}
}
