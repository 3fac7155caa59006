package plugin_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/bridge/pb"
	"github.com/atom-go/atom/plugin"
)

// TestInjectedFaultKillsThePlugin: with ATOM_GO_DEBUG_FAULT armed, the plugin dies at its N-th
// increment (exit or panic) or at the step after it (devicefault: the lost device makes it
// exit), and the stream in flight ends with Unavailable rather than hanging or failing with
// the step's error.
func TestInjectedFaultKillsThePlugin(t *testing.T) {
	for _, mode := range []string{"exit", "panic", "devicefault"} {
		t.Run(mode, func(t *testing.T) {
			t.Setenv(plugin.FaultEnv, mode+"@1")
			_, conn := startPlugin(t)
			load(t, conn, "llama-bf16", nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // the guard only
			defer cancel()
			got, err := collect(ctx, conn, longRequest("doomed"))
			require.Error(t, err, "the plugin must die before the end")
			require.NoError(t, ctx.Err(), "the client must see the death before the guard deadline")
			require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
			if mode != "devicefault" { // steps the loop ran before the injection still send theirs
				require.LessOrEqual(t, got.msgs, 1, "nothing is sent after the armed increment")
			}
			_, err = conn.Describe(ctx, &pb.DescribeRequest{WireVersion: bridge.WireVersion})
			require.Error(t, err)
		})
	}
}
