package plugin_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/bridge/pb"
	"github.com/atom-go/atom/plugin"
)

// record runs the scripted workload on a plugin subprocess with ATOM_GO_RECORD set (and
// ATOM_GO_RECORD_MAX_BYTES when max is not empty) and returns the recording's path.
func record(t *testing.T, max string) (string, *recSched) {
	path := filepath.Join(t.TempDir(), "session.rec")
	t.Setenv("ATOM_GO_RECORD", path)
	if max != "" {
		t.Setenv("ATOM_GO_RECORD_MAX_BYTES", max)
	}
	c, conn := startPlugin(t)
	// As the Python shim loads it: --device auto, resolved to the cpu here.
	load(t, conn, "qwen2-bf16", func(r *pb.LoadModelRequest) { r.Device = "auto" })
	s := recordWorkload(t, conn)
	c.Kill() // graceful: the plugin closes the file
	return path, s
}

func readRecording(t *testing.T, path string) (bridge.RecordingHeader, []*bridge.CallRecord) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	rr, err := bridge.NewRecordingReader(f)
	require.NoError(t, err)
	var recs []*bridge.CallRecord
	for {
		rec, err := rr.Next()
		if errors.Is(err, io.EOF) {
			return rr.Header, recs
		}
		require.NoError(t, err)
		recs = append(recs, rec)
	}
}

func writeRecording(t *testing.T, path string, h bridge.RecordingHeader, recs []*bridge.CallRecord) {
	t.Helper()
	var buf bytes.Buffer
	w, err := bridge.NewRecordingWriter(&buf, h, 1<<30)
	require.NoError(t, err)
	for _, rec := range recs {
		if rec.Call == bridge.CallEnd {
			require.NoError(t, w.End(rec.Error))
			continue
		}
		ok, err := w.Write(rec)
		require.NoError(t, err)
		require.True(t, ok)
	}
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
}

// replayCLI runs `atom-plugin replay ARGS...` and returns its exit code and output.
func replayCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"replay"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), out.String(), errOut.String()
	}
	require.NoError(t, err)
	return 0, out.String(), errOut.String()
}

// TestRecordAndReplay: a session recorded on the cpu replays exactly on the cpu (with the
// recorded engine flags and with another thread count); a recording with one sampled token
// changed fails, naming the request and the step, in process and through the command.
func TestRecordAndReplay(t *testing.T) {
	path, s := record(t, "")
	h, recs := readRecording(t, path)
	require.Equal(t, int64(bridge.RecordingFormatVersion), h.FormatVersion)
	require.Equal(t, "Qwen2ForCausalLM", h.Model.Architecture)
	require.NotEmpty(t, h.Model.ConfigSHA256)
	require.Equal(t, "cpu", h.Model.Device, "the device --device auto resolved to")
	calls := map[string]int{}
	for _, r := range recs {
		calls[r.Call]++
	}
	require.Equal(t, 1, calls[bridge.CallInitKVCache])
	require.Equal(t, 2, calls[bridge.CallAbort], "the RPC abort and the unknown id")
	require.Equal(t, s.steps+1, calls[bridge.CallExecuteModel], "every step and the refused payload")

	for _, extra := range [][]string{nil, {"--threads=1"}} {
		rep, err := plugin.Replay(path, plugin.ReplayOptions{ExtraArgs: extra})
		require.NoError(t, err)
		require.True(t, rep.OK, "mismatch %v with %v", rep.Mismatch, extra)
		require.Equal(t, len(recs), rep.Calls)
		require.Equal(t, s.steps+1, rep.Steps)
		require.Positive(t, rep.Tokens["greedy"])
		require.Positive(t, rep.Tokens["seeded"])
		require.Positive(t, rep.Tokens["random"])
		require.Zero(t, rep.Skipped)
		require.Zero(t, rep.NumNearTies)
		require.LessOrEqual(t, rep.MaxLogprobDiff, 1e-5)
		t.Logf("replay %v: %d calls, %d steps, tokens %v, largest logprob difference %g; workload: %d chunks, %d prefix hits, %d preemptions",
			extra, rep.Calls, rep.Steps, rep.Tokens, rep.MaxLogprobDiff, s.chunked, s.prefixHits, s.preemptions)
	}
	code, out, stderr := replayCLI(t, path, "--json")
	require.Equal(t, 0, code, stderr)
	var rep plugin.ReplayReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.True(t, rep.OK)

	// Change the third sampled token of greedy-long in the recorded results.
	step, seen := 0, 0
	var target int
	for _, rec := range recs {
		if rec.Call != bridge.CallExecuteModel || rec.Code != 0 {
			continue
		}
		step++
		res, err := bridge.DecodeResult(rec.Result)
		require.NoError(t, err)
		i := indexOf(res.ReqIDs, "greedy-long")
		if i < 0 || len(res.SampledTokenIDs[i]) == 0 {
			continue
		}
		if seen++; seen == 3 {
			res.SampledTokenIDs[i][0] = (res.SampledTokenIDs[i][0] + 1) % 384
			rec.Result, err = bridge.EncodeResult(res)
			require.NoError(t, err)
			target = step
			break
		}
	}
	require.Positive(t, target)
	edited := filepath.Join(t.TempDir(), "edited.rec")
	writeRecording(t, edited, h, recs)
	bad, err := plugin.Replay(edited, plugin.ReplayOptions{})
	require.NoError(t, err)
	require.False(t, bad.OK)
	require.Equal(t, 1, bad.Mismatches, "the edited token, and nothing of that request after it")
	require.Equal(t, "greedy-long", bad.Mismatch.RequestID)
	require.Equal(t, 2, bad.Mismatch.Token)
	require.Equal(t, "greedy token", bad.Mismatch.What)
	// Steps count the refused payload too; it comes after greedy-long's prefill.
	require.Contains(t, []int{target, target + 1}, bad.Mismatch.Step)
	code, out, stderr = replayCLI(t, edited)
	require.Equal(t, 1, code)
	require.Contains(t, out, `MISMATCH: 1 differences; the first: call `)
	require.Contains(t, out, `request "greedy-long" token 2: greedy token: recorded`)
	require.Contains(t, stderr, "the replay differs from the recording")
}

func indexOf(ids []string, id string) int {
	for i, x := range ids {
		if x == id {
			return i
		}
	}
	return -1
}

// TestRecordingCapStopsRecordingNotServing: at the size cap the recorder writes its end
// record and stops while the workload runs on; the prefix it kept replays exactly.
func TestRecordingCapStopsRecordingNotServing(t *testing.T) {
	path, _ := record(t, "6000")
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.LessOrEqual(t, st.Size(), int64(6000))
	_, recs := readRecording(t, path)
	require.Equal(t, bridge.CallEnd, recs[len(recs)-1].Call)
	require.Contains(t, recs[len(recs)-1].Error, "cap of 6000 bytes")
	rep, err := plugin.Replay(path, plugin.ReplayOptions{})
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Mismatch)
	require.Contains(t, rep.EndedEarly, "cap")
	require.Equal(t, len(recs)-1, rep.Calls)
}

// TestReplayRefusesBadRecordings: broken files and a different model are refused with a
// clear error, never replayed.
func TestReplayRefusesBadRecordings(t *testing.T) {
	path, _ := record(t, "")
	good, err := os.ReadFile(path)
	require.NoError(t, err)
	dir := t.TempDir()
	h, recs := readRecording(t, path)
	other := h
	other.Model.Architecture = "LlamaForCausalLM"
	otherModel := filepath.Join(dir, "other.rec")
	writeRecording(t, otherModel, other, recs)
	tests := []struct {
		name string
		file func() string
		opts plugin.ReplayOptions
		msg  string
	}{
		{"missing", func() string { return filepath.Join(dir, "none.rec") }, plugin.ReplayOptions{}, "no such file"},
		{"not a recording", write(t, dir, []byte("{}")), plugin.ReplayOptions{}, "magic"},
		{"truncated", write(t, dir, good[:len(good)-3]), plugin.ReplayOptions{}, "truncated"},
		{"corrupt frame", write(t, dir, corrupt(good)), plugin.ReplayOptions{}, "invalid recording"},
		{"oversized header", write(t, dir, append([]byte(bridge.RecordingMagic), 0x7f, 0xff, 0xff, 0xff)), plugin.ReplayOptions{}, "declares"},
		{"other model", func() string { return otherModel }, plugin.ReplayOptions{}, "is not the recorded model"},
		{"model override", func() string { return path }, plugin.ReplayOptions{Model: model(t, "llama-bf16")}, "is not the recorded model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := plugin.Replay(tt.file(), tt.opts)
			require.ErrorIs(t, err, plugin.ErrReplaySetup)
			require.ErrorContains(t, err, tt.msg)
		})
	}
	code, _, stderr := replayCLI(t, filepath.Join(dir, "none.rec"))
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "atom-plugin replay: replay setup")
}

func write(t *testing.T, dir string, b []byte) func() string {
	return func() string {
		f, err := os.CreateTemp(dir, "bad-*.rec")
		require.NoError(t, err)
		_, err = f.Write(b)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		return f.Name()
	}
}

// corrupt flips the first byte of the second frame's body into an extension type.
func corrupt(good []byte) []byte {
	b := bytes.Clone(good)
	at := len(bridge.RecordingMagic)
	size := int(b[at])<<24 | int(b[at+1])<<16 | int(b[at+2])<<8 | int(b[at+3])
	b[at+4+size+4] = 0xc7
	return b
}

// TestReplayCLIInfo: --info prints the header with the LoadModel request decoded.
func TestReplayCLIInfo(t *testing.T) {
	path, _ := record(t, "")
	code, out, stderr := replayCLI(t, "--info", path)
	require.Equal(t, 0, code, stderr)
	require.True(t, strings.Contains(out, `"modelPath"`) && strings.Contains(out, "qwen2-bf16"), out)
	require.Contains(t, out, `"architecture": "Qwen2ForCausalLM"`)
}
