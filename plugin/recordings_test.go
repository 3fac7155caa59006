package plugin_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/plugin"
)

// TestCommittedRecordingsReplayExactly: every recording in testdata/recordings (vLLM's and
// SGLang's traffic on the cpu backend, `make recordings`) replays exactly on the cpu, on the
// repository's checkpoint of the name it was recorded on.
func TestCommittedRecordingsReplayExactly(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "recordings", "*.rec"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "testdata/recordings holds the frameworks' recordings")
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			f, err := os.Open(file)
			require.NoError(t, err)
			rr, err := bridge.NewRecordingReader(f)
			f.Close()
			require.NoError(t, err)
			rep, err := plugin.Replay(file, plugin.ReplayOptions{Model: model(t, filepath.Base(rr.Header.Model.Path))})
			require.NoError(t, err)
			require.True(t, rep.OK, "first difference: %v", rep.Mismatch)
			require.Zero(t, rep.Skipped)
			require.Positive(t, rep.Tokens["greedy"])
			require.Positive(t, rep.Tokens["seeded"])
			t.Logf("%d calls, %d steps, tokens %v, workload %+v", rep.Calls, rep.Steps, rep.Tokens, rep.Workload)
		})
	}
}
