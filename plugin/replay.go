package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/bridge/pb"
)

// Replay drives a fresh engine with a recording's calls, in order, through the same Server
// methods the gRPC service calls (in process: gRPC only carries the bytes, which are fed to
// the methods as they were recorded), and compares every answer with the recorded one under
// the tolerance of the two backends (docs/recording.md).

// ReplayOptions configure Replay.
type ReplayOptions struct {
	// Model replaces the recorded checkpoint path, Device the recorded device and DType the
	// recorded activations' dtype ("": as recorded). A cpu recording of 16-bit weights was
	// computed in float32: replayed on the GPU with DType "float32" it must reproduce the
	// recorded tokens, where 16-bit activations flip near-equal greedy choices. ExtraArgs are
	// engine flags added after the recorded ones (they win).
	Model     string
	Device    string
	DType     string
	ExtraArgs []string
	// IgnoreModelIdentity replays on a checkpoint whose identity differs from the header's.
	IgnoreModelIdentity bool
	// Tolerance, when non-nil, replaces DefaultTolerance.
	Tolerance *Tolerance
	// MaxListed bounds the near-ties and mismatches listed in the report (0: 20).
	MaxListed int
	Version   string
	Logger    hclog.Logger
}

// ErrReplaySetup is wrapped by the errors that stop a replay before it compared anything
// useful: an unreadable recording, a model that does not load or is not the recorded one.
var ErrReplaySetup = errors.New("replay setup")

// Replay replays the recording at path. A mismatch is not an error: it is in the report
// (OK false). Errors are about the recording or the setup.
func Replay(path string, opts ReplayOptions) (*ReplayReport, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrReplaySetup, err)
	}
	defer f.Close()
	rr, err := bridge.NewRecordingReader(f)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrReplaySetup, path, err)
	}
	h := &rr.Header
	var req pb.LoadModelRequest
	if err := proto.Unmarshal(h.LoadModelRequest, &req); err != nil {
		return nil, fmt.Errorf("%w: %s: decode the recorded LoadModel request: %v", ErrReplaySetup, path, err)
	}
	recDevice := recordedDevice(h, &req)
	req.WireVersion = bridge.WireVersion
	if opts.Model != "" {
		req.ModelPath = opts.Model
	}
	if opts.Device != "" {
		req.Device = opts.Device
	}
	if opts.DType != "" {
		req.Dtype = opts.DType
	}
	req.ExtraArgs = append(req.ExtraArgs, opts.ExtraArgs...)
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	srv := NewServer(opts.Version, log)
	defer srv.Close()
	if err := srv.LoadModel(&req, &loadSink{ctx: context.Background()}); err != nil {
		return nil, fmt.Errorf("%w: load %s: %v", ErrReplaySetup, req.GetModelPath(), status.Convert(err).Message())
	}
	info := srv.info()
	if err := sameModel(&h.Model, identity(info)); err != nil && !opts.IgnoreModelIdentity {
		return nil, fmt.Errorf("%w: %s is not the recorded model (%v); --ignore-model-identity replays anyway", ErrReplaySetup, req.GetModelPath(), err)
	}
	tol := DefaultTolerance(recDevice, info.GetDevice(), info.GetDtype())
	if opts.Tolerance != nil {
		tol = *opts.Tolerance
	}
	c := newComparer(tol, opts.MaxListed)
	rep := c.rep
	rep.Recording, rep.Model, rep.RecordedWith = path, req.GetModelPath(), h.AtomGoVersion
	rep.RecordedDevice, rep.Device, rep.DType = recDevice, info.GetDevice(), info.GetDtype()
	ctx := context.Background()
	for {
		rec, err := rr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s after %d calls: %w", ErrReplaySetup, path, rep.Calls, err)
		}
		if rec.Call == bridge.CallEnd {
			rep.EndedEarly = rec.Error
			break
		}
		rep.Calls++
		if rec.Code != 0 {
			rep.Workload.Refused++
		}
		if !c.call(ctx, srv, rec) {
			break
		}
	}
	rep.OK = rep.Mismatches == 0
	return rep, nil
}

// call replays one record; false when the replay cannot go on (the KV cache was refused).
func (c *comparer) call(ctx context.Context, srv *Server, rec *bridge.CallRecord) bool {
	switch rec.Call {
	case bridge.CallInitKVCache:
		_, err := srv.InitKVCache(ctx, &pb.InitKVCacheRequest{NumBlocks: int32(min(rec.NumBlocks, 1<<31-1)), BlockSize: int32(min(rec.BlockSize, 1<<31-1))})
		return c.sameCode(rec, -1, err) || rec.Code != 0
	case bridge.CallAbort:
		c.rep.Workload.AbortCalls++
		_, err := srv.Abort(ctx, &pb.AbortRequest{RequestId: rec.RequestID})
		c.sameCode(rec, -1, err)
		delete(c.rows, rec.RequestID)
	case bridge.CallExecuteModel:
		c.rep.Steps++
		step := c.rep.Steps
		c.track(rec.Payload)
		resp, err := srv.ExecuteModel(ctx, &pb.ExecuteModelRequest{Payload: rec.Payload})
		if !c.sameCode(rec, step, err) || err != nil {
			return true
		}
		want, werr := bridge.DecodeResult(rec.Result)
		got, gerr := bridge.DecodeResult(resp.GetResult())
		if werr != nil || gerr != nil {
			c.mismatch(Difference{Call: rec.Seq, Step: step, What: "result", Want: errString(werr), Got: errString(gerr)})
			return true
		}
		c.compare(rec.Seq, step, want, got)
	}
	return true
}

// sameCode compares the replayed call's status with the recorded one.
func (c *comparer) sameCode(rec *bridge.CallRecord, step int, err error) bool {
	got := status.Convert(err)
	if int64(got.Code()) == rec.Code {
		return true
	}
	want := codes.Code(uint32(rec.Code)).String()
	if rec.Error != "" {
		want += ": " + rec.Error
	}
	have := got.Code().String()
	if err != nil {
		have += ": " + got.Message()
	}
	c.mismatch(Difference{Call: rec.Seq, Step: step, RequestID: rec.RequestID, What: rec.Call + " status", Want: want, Got: have})
	return false
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// sameModel compares the loaded model's identity with the recorded one.
func sameModel(want *bridge.ModelIdentity, got bridge.ModelIdentity) error {
	switch {
	case want.Architecture != got.Architecture:
		return fmt.Errorf("architecture %q, recorded %q", got.Architecture, want.Architecture)
	case want.VocabSize != got.VocabSize || want.NumLayers != got.NumLayers || want.HiddenSize != got.HiddenSize:
		return fmt.Errorf("vocabulary %d, %d layers, hidden size %d; recorded %d, %d, %d",
			got.VocabSize, got.NumLayers, got.HiddenSize, want.VocabSize, want.NumLayers, want.HiddenSize)
	case want.ConfigSHA256 != "" && got.ConfigSHA256 != "" && want.ConfigSHA256 != got.ConfigSHA256:
		return fmt.Errorf("config.json digest %.12s, recorded %.12s", got.ConfigSHA256, want.ConfigSHA256)
	}
	return nil
}

// loadSink is the LoadModel stream of an in-process call: progress is dropped.
type loadSink struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *loadSink) Send(*pb.LoadProgress) error { return nil }
func (s *loadSink) Context() context.Context    { return s.ctx }

// recordedDevice is the backend that served the recording: the loaded model's device in the
// header (--device auto resolved), else the one the LoadModel request named, else the cpu
// (the default before --device auto existed).
func recordedDevice(h *bridge.RecordingHeader, req *pb.LoadModelRequest) string {
	for _, d := range []string{h.Model.Device, req.GetDevice()} {
		if d == "cpu" || d == "gpu" {
			return d
		}
	}
	return "cpu"
}
