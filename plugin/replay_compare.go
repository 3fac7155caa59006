package plugin

import (
	"fmt"
	"math"
	"slices"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/engine"
)

// Tolerance says how a replay's answers may differ from the recording's.
type Tolerance struct {
	// Logprob bounds |replayed − recorded| for the logprob of the same token.
	Logprob float64 `json:"logprob"`
	// Tie: a sampled token that differs is a near-tie, not a mismatch, when the recording or
	// the replay holds both tokens' logprobs and they are within Tie of each other (greedy
	// rows), or both sides hold both tokens within Logprob of each other (sampled rows).
	// 0: every differing token is a mismatch.
	Tie float64 `json:"tie"`
	// CrossBackend: the order of near-equal top alternatives and the rank may differ.
	CrossBackend bool `json:"cross_backend"`
	// RandomRows compares the tokens of rows sampled with temperature > 0 (false: the
	// replay's sampler draws differently from the recording's, so they are not compared).
	RandomRows bool `json:"random_rows"`
}

// DefaultTolerance is the tolerance of replaying a recording made on recDevice on device
// with weights of dtype: a cpu recording replayed on the cpu must be exact (logprobs within
// 1e-5, a margin for a different thread count's summation order); across backends logprobs
// may differ by the 16-bit activations' rounding (5e-2; 2e-3 in float32), a token may flip
// where the two candidates are within twice that, and sampled rows are compared only when
// the gpu samples on the host (ATOM_GO_HOST_SAMPLING: the device sampler's draws are its own).
func DefaultTolerance(recDevice, device, dtype string) Tolerance {
	if recDevice == "cpu" && device == "cpu" {
		return Tolerance{Logprob: 1e-5, RandomRows: true}
	}
	lp := 5e-2
	if dtype == "float32" {
		lp = 2e-3
	}
	return Tolerance{Logprob: lp, Tie: 2 * lp, CrossBackend: true, RandomRows: engine.Env("ATOM_GO_HOST_SAMPLING") != ""}
}

// ReplayReport is the outcome of a replay.
type ReplayReport struct {
	Recording      string `json:"recording"`
	RecordedWith   string `json:"recorded_with"` // atom-go version of the recording
	Model          string `json:"model"`
	RecordedDevice string `json:"recorded_device"`
	Device         string `json:"device"`
	DType          string `json:"dtype"`
	// Calls replayed, of which Steps were ExecuteModel.
	Calls int `json:"calls"`
	Steps int `json:"steps"`
	// Tokens compared, by row class (greedy, seeded, random); Skipped were not compared
	// (random rows a sampler of its own drew, rows after a near-tie or a mismatch).
	Tokens    map[string]int `json:"tokens"`
	Skipped   int            `json:"skipped"`
	Tolerance Tolerance      `json:"tolerance"`
	// MaxLogprobDiff is the largest |replayed − recorded| logprob of the same token.
	MaxLogprobDiff float64 `json:"max_logprob_diff"`
	// NearTies lists the first flipped tokens that were within the tie tolerance.
	NumNearTies int          `json:"num_near_ties"`
	NearTies    []Difference `json:"near_ties,omitempty"`
	// Mismatches counts the differences beyond tolerance; Mismatch is the first, Listed the
	// first few.
	Mismatches int          `json:"mismatches"`
	Mismatch   *Difference  `json:"mismatch,omitempty"`
	Listed     []Difference `json:"listed,omitempty"`
	// Workload is what the recorded session exercised.
	Workload Workload `json:"workload"`
	// EndedEarly is the recorder's reason when the recording stops before the session did.
	EndedEarly string `json:"ended_early,omitempty"`
	OK         bool   `json:"ok"`
}

// Workload counts what a recording exercised, from its payloads.
type Workload struct {
	NewRequests   int `json:"new_requests"`
	PrefixHits    int `json:"prefix_hits"`    // new requests with tokens already in the KV cache
	PrefillChunks int `json:"prefill_chunks"` // scheduled rows that sampled nothing
	Resumed       int `json:"resumed"`        // cached rows resumed after preemption
	Finished      int `json:"finished"`       // ids in finished_req_ids (finished or aborted by the host)
	AbortCalls    int `json:"abort_calls"`
	Refused       int `json:"refused_calls"` // calls the plugin answered with an error
	MaxBatch      int `json:"max_batch"`     // most rows in one step
}

// Difference is one answer of the replay that differs from the recording.
type Difference struct {
	Call      int64  `json:"call"`        // the record's number
	Step      int    `json:"step"`        // 1-based ExecuteModel step; -1 for other calls
	RequestID string `json:"request_id"`  // "" when not about one request
	Token     int    `json:"token_index"` // the request's n-th sampled token (0-based)
	What      string `json:"what"`        // token, logprob, top ids, rank, request ids, ...
	Want      string `json:"want"`        // recorded
	Got       string `json:"got"`         // replayed
	Detail    string `json:"detail,omitempty"`
}

// String is the one-line report of a difference.
func (d Difference) String() string {
	s := fmt.Sprintf("call %d", d.Call)
	if d.Step > 0 {
		s += fmt.Sprintf(" (step %d)", d.Step)
	}
	if d.RequestID != "" {
		s += fmt.Sprintf(", request %q token %d", d.RequestID, d.Token)
	}
	s += fmt.Sprintf(": %s: recorded %s, replayed %s", d.What, d.Want, d.Got)
	if d.Detail != "" {
		s += " (" + d.Detail + ")"
	}
	return s
}

// Row classes.
const (
	rowGreedy = "greedy"
	rowSeeded = "seeded"
	rowRandom = "random"
)

type rowState struct {
	class    string
	n        int  // tokens sampled so far in the recording
	diverged bool // a near-tie or a mismatch: later tokens are not compared
}

type comparer struct {
	tol  Tolerance
	max  int
	rows map[string]*rowState
	rep  *ReplayReport
}

func newComparer(tol Tolerance, max int) *comparer {
	if max <= 0 {
		max = 20
	}
	return &comparer{tol: tol, max: max, rows: map[string]*rowState{},
		rep: &ReplayReport{Tolerance: tol, Tokens: map[string]int{rowGreedy: 0, rowSeeded: 0, rowRandom: 0}}}
}

// track learns the rows of a step from its payload: finished ids go, new requests start with
// their sampling class. A payload that does not decode was refused when recorded too.
func (c *comparer) track(payload []byte) {
	p, err := bridge.DecodeExecuteModel(payload)
	if err != nil {
		return
	}
	w := &c.rep.Workload
	w.Finished += len(p.FinishedReqIDs)
	w.NewRequests += len(p.NewRequests)
	w.MaxBatch = max(w.MaxBatch, len(p.NewRequests)+len(p.Cached.ReqIDs))
	for _, r := range p.Cached.ResumedFromPreemption {
		if r {
			w.Resumed++
		}
	}
	for _, id := range p.FinishedReqIDs {
		delete(c.rows, id)
	}
	for i := range p.NewRequests {
		if p.NewRequests[i].NumComputedTokens > 0 {
			w.PrefixHits++
		}
		sp := &p.NewRequests[i].SamplingParams
		class := rowRandom
		switch {
		case sp.Temperature != nil && *sp.Temperature == 0:
			class = rowGreedy
		case sp.Seed != nil:
			class = rowSeeded
		}
		c.rows[p.NewRequests[i].ReqID] = &rowState{class: class}
	}
}

func (c *comparer) mismatch(d Difference) {
	c.rep.Mismatches++
	if c.rep.Mismatch == nil {
		c.rep.Mismatch = &d
	}
	if len(c.rep.Listed) < c.max {
		c.rep.Listed = append(c.rep.Listed, d)
	}
}

// compare checks one step's result row by row, every sampled token of a row (a verify
// chunk's accepted drafts and the target's token) against its own logprobs row.
func (c *comparer) compare(seq int64, step int, want, got *bridge.ExecuteModelResult) {
	if !slices.Equal(want.ReqIDs, got.ReqIDs) {
		c.mismatch(Difference{Call: seq, Step: step, What: "request ids", Want: fmt.Sprint(want.ReqIDs), Got: fmt.Sprint(got.ReqIDs)})
		return
	}
	for i, id := range want.ReqIDs {
		row := c.rows[id]
		if row == nil { // a request whose new-request step was not recorded
			row = &rowState{class: rowRandom}
			c.rows[id] = row
		}
		w, g := want.SampledTokenIDs[i], got.SampledTokenIDs[i]
		if len(w) == 0 && len(g) == 0 {
			c.rep.Workload.PrefillChunks++
			continue
		}
		first := row.n
		for j := range min(len(w), len(g)) {
			c.token(row, Difference{Call: seq, Step: step, RequestID: id, Token: row.n}, w[j], g[j], want.TokenLogprobs(i, j), got.TokenLogprobs(i, j))
		}
		if len(w) != len(g) && !row.diverged {
			row.diverged = true
			c.mismatch(Difference{Call: seq, Step: step, RequestID: id, Token: first, What: "sampled tokens", Want: fmt.Sprint(w), Got: fmt.Sprint(g)})
		}
	}
}

// token compares one sampled token of a row and its logprobs; a difference beyond tolerance
// is a mismatch and ends the row's comparison (its later tokens follow other histories).
func (c *comparer) token(row *rowState, d Difference, w, g int32, wl, gl *bridge.Logprobs) {
	row.n++
	if row.diverged || (row.class != rowGreedy && !c.tol.RandomRows) {
		c.rep.Skipped++
		return
	}
	c.rep.Tokens[row.class]++
	if w != g {
		row.diverged = true
		d.What, d.Want, d.Got = row.class+" token", fmt.Sprint(w), fmt.Sprint(g)
		if why, ok := c.nearTie(row.class, w, g, wl, gl); ok {
			d.Detail = why
			c.rep.NumNearTies++
			if len(c.rep.NearTies) < c.max {
				c.rep.NearTies = append(c.rep.NearTies, d)
			}
			return
		}
		d.Detail = "beyond tolerance"
		if c.tol.CrossBackend {
			d.Detail = "not a near-tie by the logprobs at hand"
		}
		c.mismatch(d)
		return
	}
	if what, wv, gv := c.logprobs(wl, gl); what != "" {
		row.diverged = true
		d.What, d.Want, d.Got = what, wv, gv
		c.mismatch(d)
	}
}

// logprobs compares the logprob rows of the same sampled token; "" when they agree.
func (c *comparer) logprobs(w, g *bridge.Logprobs) (what, want, got string) {
	switch {
	case w == nil && g == nil:
		return "", "", ""
	case w == nil || g == nil:
		return "logprobs", present(w), present(g)
	case len(w.TokenIDs) != len(g.TokenIDs) || len(w.Logprobs) != len(w.TokenIDs) || len(g.Logprobs) != len(g.TokenIDs):
		return "logprob entries", fmt.Sprint(len(w.TokenIDs)), fmt.Sprint(len(g.TokenIDs))
	}
	for j := range w.Logprobs {
		diff := math.Abs(float64(w.Logprobs[j]) - float64(g.Logprobs[j]))
		if math.IsNaN(diff) {
			diff = math.Inf(1)
		}
		c.rep.MaxLogprobDiff = math.Max(c.rep.MaxLogprobDiff, diff)
		if diff > c.tol.Logprob {
			return fmt.Sprintf("logprob %d (token %d)", j, w.TokenIDs[j]), fmt.Sprint(w.Logprobs[j]), fmt.Sprint(g.Logprobs[j])
		}
	}
	if !c.tol.CrossBackend {
		if !slices.Equal(w.TokenIDs, g.TokenIDs) {
			return "top ids", fmt.Sprint(w.TokenIDs), fmt.Sprint(g.TokenIDs)
		}
		if w.Rank != g.Rank {
			return "rank", fmt.Sprint(w.Rank), fmt.Sprint(g.Rank)
		}
		return "", "", ""
	}
	// Across backends near-equal alternatives may swap places or fall off the end: a
	// recorded alternative missing from the replay's list must be within Tie of its last.
	last := float64(g.Logprobs[len(g.Logprobs)-1])
	for j := 1; j < len(w.TokenIDs); j++ {
		if w.TokenIDs[j] != g.TokenIDs[j] && !slices.Contains(g.TokenIDs[1:], w.TokenIDs[j]) &&
			math.Abs(float64(w.Logprobs[j])-last) > c.tol.Tie {
			return fmt.Sprintf("top id %d", j), fmt.Sprint(w.TokenIDs), fmt.Sprint(g.TokenIDs)
		}
	}
	return "", "", ""
}

func present(l *bridge.Logprobs) string {
	if l == nil {
		return "none"
	}
	return fmt.Sprintf("%d entries", len(l.TokenIDs))
}

// nearTie decides whether a flipped token (recorded a, replayed b) lies within the float
// margin, from the logprobs both sides returned (the host's top-N request). Without them
// it cannot be decided and the flip is a mismatch.
func (c *comparer) nearTie(class string, a, b int32, w, g *bridge.Logprobs) (string, bool) {
	if c.tol.Tie <= 0 {
		return "", false
	}
	wa, okwa := lookup(w, a)
	wb, okwb := lookup(w, b)
	ga, okga := lookup(g, a)
	gb, okgb := lookup(g, b)
	if class == rowGreedy {
		if okwa && okwb && wa-wb <= c.tol.Tie {
			return fmt.Sprintf("recorded logprobs %.4g and %.4g, gap %.2g within %.2g", wa, wb, wa-wb, c.tol.Tie), true
		}
		if okga && okgb && gb-ga <= c.tol.Tie {
			return fmt.Sprintf("replayed logprobs %.4g and %.4g, gap %.2g within %.2g", gb, ga, gb-ga, c.tol.Tie), true
		}
		return "", false
	}
	// A draw from two distributions that agree within tolerance fell between the two tokens.
	if okwa && okwb && okga && okgb && math.Abs(wa-ga) <= c.tol.Logprob && math.Abs(wb-gb) <= c.tol.Logprob {
		return fmt.Sprintf("both tokens' logprobs agree within %.2g (recorded %.4g, %.4g; replayed %.4g, %.4g)", c.tol.Logprob, wa, wb, ga, gb), true
	}
	return "", false
}

// lookup finds tok's logprob in a row (the sampled token or one of the alternatives).
func lookup(l *bridge.Logprobs, tok int32) (float64, bool) {
	if l == nil || len(l.Logprobs) != len(l.TokenIDs) {
		return 0, false
	}
	for j, t := range l.TokenIDs {
		if t == tok {
			return float64(l.Logprobs[j]), true
		}
	}
	return 0, false
}
