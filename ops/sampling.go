package ops

import (
	"math"
	"sort"
)

// RowSampling are the sampling controls of one row of logits, as a DeviceSampler takes them.
type RowSampling struct {
	Temperature float32 // <= 0 (or NaN): greedy
	TopK        int32   // keep the TopK most likely tokens; 0 (or >= the vocabulary): all
	TopP        float32 // nucleus mass in (0, 1]; 1: off
	MinP        float32 // keep tokens with p >= MinP * p_max; 0: off
	Seed        uint64  // with Offset, keys the random numbers of the draw
	Offset      uint64  // the number of tokens the sequence generated so far
}

// SampledToken is a drawn token and its logprob under the raw (unfiltered, temperature 1)
// distribution of its row: logit - logsumexp of the row's finite logits.
type SampledToken struct {
	Token   int32
	Logprob float32
}

// DeviceSampler is implemented by backends that sample on the device (the gpu backend).
//
// SampleRows draws one token per row of logits ([rows >= len(params), vocab]) with params[r]
// for row r, by exactly the algorithm of SampleRow (up to float rounding: exp and log on the
// device are not correctly rounded, so a token whose score ties another's within an ulp, or
// whose mass sits exactly at a top-p boundary, may differ), and writes the results into
// out[:len(params)]. It waits for the queued work, like Backend.ReadRows; a row's result
// depends only on that row and its params, never on the rest of the batch.
type DeviceSampler interface {
	SampleRows(logits Tensor, params []RowSampling, out []SampledToken)
}

// QueuedSampler is a DeviceSampler whose draws can stay queued: QueueSample queues the work of
// SampleRows and returns at once, so the host can queue the next step (whose input tokens the
// device takes from this draw) before the draw is known; CollectSample waits for the oldest
// queued draw and writes its results into out[:rows]. At most MaxQueuedDraws draws are
// queued at a time; SampleRows needs none queued. Errors leave the queue as it was.
type QueuedSampler interface {
	DeviceSampler
	QueueSample(logits Tensor, params []RowSampling) error
	CollectSample(out []SampledToken) (rows int, err error)
}

// MaxQueuedDraws is how many draws a QueuedSampler holds: the running step's and the next's.
const MaxQueuedDraws = 2

// massOne is the fixed-point weight of the most likely token (2^40): top-p sums integers.
const massOne = 1 << 40

const golden = 0x9E3779B97F4A7C15

// SampleRow is the reference of the device sampler, for one row of logits:
//
//  1. Greedy (Temperature <= 0 or NaN, no finite logit, or max/T overflowing): the first
//     index of the largest logit, NaN never winning (-1 for a row of NaN).
//  2. Otherwise z = logit/T in float32; only finite z take part. Every filter is a threshold
//     on z's order-preserving key (ties at a threshold are kept): TopK (when 0 < TopK < the
//     finite count) keeps key >= the key of the TopK-th largest z; TopP (< 1) then keeps the
//     largest key t such that the tokens with key >= t hold at least ceil(TopP * mass of the
//     top-k tokens), mass being exp(z - max z) in fixed point (2^-40, truncated); MinP (> 0)
//     keeps z - max z >= log(MinP).
//  3. The token is the argmax over the kept set of z_i + g_i (first index on ties), with
//     Gumbel noise g_i = -log(-log(Uniform(Seed, Offset, i))): a draw from softmax(z) over
//     the kept set.
//
// The logprob is the chosen logit minus the log-sum-exp of the finite logits (float64 here).
func SampleRow(row []float32, p RowSampling) SampledToken {
	greedy, xmax, lse, n := rawPass(row)
	tok := greedy
	if p.Temperature > 0 && n > 0 {
		if zmax := xmax / p.Temperature; !math.IsInf(float64(zmax), 0) {
			if t := draw(row, p, zmax, n); t >= 0 {
				tok = t
			}
		}
	}
	out := SampledToken{Token: tok, Logprob: float32(math.NaN())}
	if tok >= 0 && n > 0 {
		out.Logprob = float32(float64(row[tok]) - lse)
	}
	return out
}

// better reports whether (v, i) beats (bv, bi): larger, or equal and earlier; NaN never wins.
func better(v float32, i int32, bv float32, bi int32) bool {
	if v != v {
		return false
	}
	return bi < 0 || v > bv || (v == bv && i < bi)
}

// rawPass returns the greedy pick, the largest finite logit, the log-sum-exp of the finite
// logits and their count.
func rawPass(row []float32) (greedy int32, xmax float32, lse float64, n int) {
	greedy, xmax = -1, float32(math.Inf(-1))
	var best float32
	for i, v := range row {
		if better(v, int32(i), best, greedy) {
			best, greedy = v, int32(i)
		}
		if finite(v) {
			n++
			xmax = max(xmax, v)
		}
	}
	var s float64
	for _, v := range row {
		if finite(v) {
			s += math.Exp(float64(v) - float64(xmax))
		}
	}
	return greedy, xmax, float64(xmax) + math.Log(s), n
}

func finite(v float32) bool { return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) }

// candidate is a token taking part in a draw.
type candidate struct {
	i   int32
	z   float32
	key uint32
}

// draw applies the filters and the Gumbel-max draw; -1 when nothing is kept.
func draw(row []float32, p RowSampling, zmax float32, n int) int32 {
	cands := make([]candidate, 0, len(row))
	for i, v := range row {
		if z := v / p.Temperature; finite(z) {
			cands = append(cands, candidate{i: int32(i), z: z, key: FloatKey(z)})
		}
	}
	var lo uint32
	if p.TopK > 0 && int(p.TopK) < n {
		lo = selectKey(cands, 0, uint64(p.TopK), func(candidate) uint64 { return 1 })
	}
	if p.TopP < 1 {
		mass := func(c candidate) uint64 { return Mass(c.z, zmax) }
		var total uint64
		for _, c := range cands {
			if c.key >= lo {
				total += mass(c)
			}
		}
		target := max(uint64(math.Ceil(float64(p.TopP)*float64(total))), 1)
		lo = max(lo, selectKey(cands, lo, target, mass))
	}
	logMinP := float32(math.Inf(-1))
	if p.MinP > 0 {
		logMinP = float32(math.Log(float64(p.MinP)))
	}
	key := RowKey(p.Seed, p.Offset)
	best, bi := float32(0), int32(-1)
	for _, c := range cands {
		if c.key < lo || c.z-zmax < logMinP {
			continue
		}
		if s := c.z + Gumbel(key, c.i); better(s, c.i, best, bi) {
			best, bi = s, c.i
		}
	}
	return bi
}

// selectKey returns the largest key t such that the candidates with key >= lo and key >= t
// weigh at least target (0 when they weigh less in all): what the device's radix select finds.
func selectKey(cands []candidate, lo uint32, target uint64, weight func(candidate) uint64) uint32 {
	var keep []candidate
	for _, c := range cands {
		if c.key >= lo {
			keep = append(keep, c)
		}
	}
	sort.Slice(keep, func(a, b int) bool { return keep[a].key > keep[b].key })
	var cum uint64
	for _, c := range keep {
		if cum += weight(c); cum >= target {
			return c.key
		}
	}
	return 0
}

// FloatKey maps a float32 to a uint32 of the same order (-0 to +0's key).
func FloatKey(f float32) uint32 {
	u := math.Float32bits(f)
	if u == 0x80000000 {
		u = 0
	}
	if u&0x80000000 != 0 {
		return ^u
	}
	return u | 0x80000000
}

// Mass is the fixed-point weight of z in the top-p sums: exp(z - zmax) * 2^40, truncated.
func Mass(z, zmax float32) uint64 {
	return uint64(float32(math.Exp(float64(z-zmax))) * massOne)
}

// Fmix64 is splitmix64's finaliser.
func Fmix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// RowKey keys the random numbers of one draw: fmix64(fmix64(seed) + (offset+1)*golden).
func RowKey(seed, offset uint64) uint64 { return Fmix64(Fmix64(seed) + (offset+1)*golden) }

// Uniform is token i's number in (0, 1): with bits = fmix64(rowKey + (i+1)*golden),
// (2*(bits>>41) + 1) * 2^-24, exact in float32.
func Uniform(rowKey uint64, i int32) float32 {
	bits := Fmix64(rowKey + uint64(i+1)*golden)
	return float32((bits>>41)*2+1) * 0x1p-24
}

// Gumbel is -log(-log(Uniform(rowKey, i))), each log rounded to float32 as the device does.
func Gumbel(rowKey uint64, i int32) float32 {
	a := float32(math.Log(float64(Uniform(rowKey, i))))
	return -float32(math.Log(float64(-a)))
}
