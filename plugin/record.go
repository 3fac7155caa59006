package plugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/bridge/pb"
	"github.com/atom-go/atom/engine"
)

// DefaultRecordMaxBytes caps a recording when ATOM_GO_RECORD_MAX_BYTES is not set.
const DefaultRecordMaxBytes = 1 << 30

// Recording (docs/recording.md): with ATOM_GO_RECORD set, the Server that Serve registers is
// wrapped by a recordingServer, which writes the host-scheduled bridge calls (InitKVCache,
// ExecuteModel, Abort: requests and answers, bytes as they crossed the wire) to that file for
// `atom-plugin replay`. The file is created when the first LoadModel succeeds (its header
// needs the model). Recording never fails a call: an error writing the file, the size cap or
// a second LoadModel stops it with a logged warning and serving goes on.

// recordingServer is the Server with its host-scheduled calls recorded.
type recordingServer struct {
	*Server
	rec *recorder
}

type recorder struct {
	path    string
	max     int64
	version string
	log     hclog.Logger

	mu      sync.Mutex
	f       *os.File
	w       *bridge.RecordingWriter
	stopped bool
}

// WithRecording returns srv as Serve registers it: wrapped by the recorder when
// ATOM_GO_RECORD names a file, srv itself otherwise. The function returned closes the file.
func WithRecording(srv *Server, version string, log hclog.Logger) (pb.AtomEngineServer, func()) {
	path := engine.Env("ATOM_GO_RECORD")
	if path == "" {
		return srv, func() {}
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	max := int64(DefaultRecordMaxBytes)
	if v := engine.Env("ATOM_GO_RECORD_MAX_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			log.Warn("recording: ATOM_GO_RECORD_MAX_BYTES is not a positive integer; using the default", "value", v, "default", max)
		} else {
			max = n
		}
	}
	rec := &recorder{path: path, max: max, version: version, log: log}
	return &recordingServer{Server: srv, rec: rec}, rec.close
}

// LoadModel starts the recording once the first model loaded.
func (r *recordingServer) LoadModel(req *pb.LoadModelRequest, stream pb.AtomEngine_LoadModelServer) error {
	err := r.Server.LoadModel(req, stream)
	if err == nil {
		r.rec.start(req, r.Server.info())
	}
	return err
}

// InitKVCache is recorded with its status.
func (r *recordingServer) InitKVCache(ctx context.Context, req *pb.InitKVCacheRequest) (*pb.InitKVCacheResponse, error) {
	resp, err := r.Server.InitKVCache(ctx, req)
	r.rec.add(&bridge.CallRecord{Call: bridge.CallInitKVCache, NumBlocks: int64(req.GetNumBlocks()), BlockSize: int64(req.GetBlockSize())}, err)
	return resp, err
}

// ExecuteModel is recorded with the payload as sent and the result as returned.
func (r *recordingServer) ExecuteModel(ctx context.Context, req *pb.ExecuteModelRequest) (*pb.ExecuteModelResponse, error) {
	resp, err := r.Server.ExecuteModel(ctx, req)
	r.rec.add(&bridge.CallRecord{Call: bridge.CallExecuteModel, Payload: req.GetPayload(), Result: resp.GetResult()}, err)
	return resp, err
}

// Abort is recorded with its status (NOT_FOUND for an id without state).
func (r *recordingServer) Abort(ctx context.Context, req *pb.AbortRequest) (*pb.AbortResponse, error) {
	resp, err := r.Server.Abort(ctx, req)
	r.rec.add(&bridge.CallRecord{Call: bridge.CallAbort, RequestID: req.GetRequestId()}, err)
	return resp, err
}

// start creates the file and writes the header, or stops recording at a second load.
func (r *recorder) start(req *pb.LoadModelRequest, info *pb.ModelInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.stopped:
		return
	case r.w != nil:
		r.stopLocked("a second LoadModel replaced the recorded model")
		return
	}
	raw, err := proto.Marshal(req)
	if err != nil {
		r.failLocked(fmt.Errorf("encode the LoadModel request: %w", err))
		return
	}
	h := bridge.RecordingHeader{AtomGoVersion: r.version, Created: time.Now().UTC().Format(time.RFC3339), LoadModelRequest: raw,
		Model: identity(info)}
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		r.failLocked(err)
		return
	}
	w, err := bridge.NewRecordingWriter(f, h, r.max)
	if err != nil {
		f.Close()
		r.failLocked(err)
		return
	}
	r.f, r.w = f, w
	r.log.Info("recording the host's bridge calls", "file", r.path, "max_bytes", r.max)
}

// add writes one call, with err's status.
func (r *recorder) add(rec *bridge.CallRecord, err error) {
	st := status.Convert(err)
	rec.Code, rec.Error = int64(st.Code()), st.Message()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w == nil || r.stopped {
		return
	}
	ok, werr := r.w.Write(rec)
	switch {
	case werr != nil:
		r.failLocked(werr)
	case !ok:
		r.stopped = true
		r.log.Warn("recording stopped: size cap reached; serving goes on", "file", r.path, "max_bytes", r.max)
	}
}

// stopLocked ends the file with an end record saying why.
func (r *recorder) stopLocked(reason string) {
	r.stopped = true
	if err := r.w.End(reason); err != nil {
		r.log.Warn("recording: write the end record", "file", r.path, "error", err)
	}
	r.log.Warn("recording stopped; serving goes on", "file", r.path, "reason", reason)
}

func (r *recorder) failLocked(err error) {
	r.stopped = true
	r.log.Warn("recording failed and stopped; serving goes on", "file", r.path, "error", err)
}

func (r *recorder) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f != nil {
		if err := r.f.Close(); err != nil {
			r.log.Warn("recording: close", "file", r.path, "error", err)
		}
		r.f = nil
	}
	r.stopped = true
}

// identity describes the loaded model for the header.
func identity(info *pb.ModelInfo) bridge.ModelIdentity {
	return bridge.ModelIdentity{Path: info.GetModelPath(), Architecture: info.GetArchitecture(), DType: info.GetDtype(), Device: info.GetDevice(),
		VocabSize: int64(info.GetVocabSize()), NumLayers: int64(info.GetNumLayers()), HiddenSize: int64(info.GetHiddenSize()),
		ConfigSHA256: configDigest(info.GetModelPath())}
}

// configDigest hashes a checkpoint's config.json, or a single-file checkpoint's first MiB;
// empty when neither can be read.
func configDigest(path string) string {
	name := path
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		name = filepath.Join(path, "config.json")
	}
	f, err := os.Open(name)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, 1<<20)); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}
