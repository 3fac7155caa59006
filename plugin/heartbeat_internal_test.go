package plugin

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLoadHeartbeatsAreFew: the LoadModel heartbeats of a load of a given length stay few,
// where one a second gave a line a second in hosts that print them.
func TestLoadHeartbeatsAreFew(t *testing.T) {
	for _, tc := range []struct {
		load time.Duration
		most int
	}{
		{500 * time.Millisecond, 0},
		{5 * time.Second, 2},
		{50 * time.Second, 5},
		{10 * time.Minute, 24},
	} {
		t.Run(tc.load.String(), func(t *testing.T) {
			n := 0
			for at, wait := time.Second, time.Second; at <= tc.load; at += wait {
				n++
				wait = nextHeartbeat(wait)
			}
			require.LessOrEqual(t, n, tc.most)
		})
	}
}
