package ops

import (
	"fmt"
	"math"
)

// RoPEScaling is a checkpoint's rope_scaling (or rope_parameters) block.
type RoPEScaling struct {
	Type            string  // "default", "linear", "llama3", "yarn"
	Factor          float64 // linear, llama3, yarn
	LowFreqFactor   float64 // llama3
	HighFreqFactor  float64 // llama3
	OriginalMaxPos  int     // llama3, yarn
	BetaFast        float64 // yarn, default 32
	BetaSlow        float64 // yarn, default 1
	AttentionFactor float64 // yarn; 0 means derived from Factor
	Mscale          float64 // yarn (DeepSeek style)
	MscaleAllDim    float64 // yarn (DeepSeek style)
	NoTruncate      bool    // yarn: truncate=false
}

// RoPE holds the rotary embedding of one model in the neox (rotate-half) layout: dimension i of
// a head pairs with dimension i+RotaryDim/2.
type RoPE struct {
	HeadDim, RotaryDim int
	InvFreq            []float64 // RotaryDim/2 inverse frequencies
	AttnFactor         float32   // multiplies cos and sin (yarn's mscale); 1 otherwise
}

// QKNorm is the RMSNorm of every query and key head before the rotation (Qwen3's q_norm and
// k_norm): Q and K are [headDim] weights, as HeadRMSNorm takes them.
type QKNorm struct {
	Q, K Tensor
	Eps  float32
}

// NewRoPE computes the inverse frequencies the way Hugging Face transformers does for each
// rope type, so positions rotate identically.
func NewRoPE(headDim, rotaryDim int, theta float64, sc RoPEScaling, maxPos int) (*RoPE, error) {
	if rotaryDim <= 0 || rotaryDim%2 != 0 || rotaryDim > headDim {
		return nil, fmt.Errorf("rope: rotary dim %d invalid for head dim %d", rotaryDim, headDim)
	}
	if theta <= 0 {
		return nil, fmt.Errorf("rope: rope_theta %v must be positive", theta)
	}
	half := rotaryDim / 2
	inv := make([]float64, half)
	for i := range inv {
		// Computed in float32 as transformers does (torch.arange(...).float() / dim).
		inv[i] = float64(float32(1.0 / math.Pow(theta, float64(float32(2*i)/float32(rotaryDim)))))
	}
	r := &RoPE{HeadDim: headDim, RotaryDim: rotaryDim, InvFreq: inv, AttnFactor: 1}
	switch sc.Type {
	case "", "default":
	case "linear":
		if sc.Factor <= 0 {
			return nil, fmt.Errorf("rope: linear scaling needs factor > 0, got %v", sc.Factor)
		}
		for i := range inv {
			inv[i] /= sc.Factor
		}
	case "llama3":
		if err := llama3Scale(inv, sc); err != nil {
			return nil, err
		}
	case "yarn":
		af, err := yarnScale(inv, sc, theta, rotaryDim, maxPos)
		if err != nil {
			return nil, err
		}
		r.AttnFactor = float32(af)
	default:
		return nil, fmt.Errorf("rope: unsupported rope_type %q (supported: default, linear, llama3, yarn)", sc.Type)
	}
	return r, nil
}

func llama3Scale(inv []float64, sc RoPEScaling) error {
	if sc.Factor <= 0 || sc.OriginalMaxPos <= 0 || sc.HighFreqFactor <= sc.LowFreqFactor {
		return fmt.Errorf("rope: llama3 scaling needs factor > 0, original_max_position_embeddings > 0 and high_freq_factor > low_freq_factor")
	}
	old := float64(sc.OriginalMaxPos)
	lowWave := old / sc.LowFreqFactor
	highWave := old / sc.HighFreqFactor
	for i, f := range inv {
		wave := 2 * math.Pi / f
		switch {
		case wave < highWave:
		case wave > lowWave:
			inv[i] = f / sc.Factor
		default:
			smooth := (old/wave - sc.LowFreqFactor) / (sc.HighFreqFactor - sc.LowFreqFactor)
			inv[i] = (1-smooth)*f/sc.Factor + smooth*f
		}
	}
	return nil
}

func yarnMscale(scale, m float64) float64 {
	if scale <= 1 {
		return 1
	}
	return 0.1*m*math.Log(scale) + 1
}

func yarnScale(inv []float64, sc RoPEScaling, theta float64, dim, maxPos int) (float64, error) {
	if sc.Factor <= 0 {
		return 0, fmt.Errorf("rope: yarn scaling needs factor > 0, got %v", sc.Factor)
	}
	orig := sc.OriginalMaxPos
	if orig <= 0 {
		orig = maxPos
	}
	af := sc.AttentionFactor
	if af == 0 {
		if sc.Mscale != 0 && sc.MscaleAllDim != 0 {
			af = yarnMscale(sc.Factor, sc.Mscale) / yarnMscale(sc.Factor, sc.MscaleAllDim)
		} else {
			af = yarnMscale(sc.Factor, 1)
		}
	}
	fast, slow := sc.BetaFast, sc.BetaSlow
	if fast == 0 {
		fast = 32
	}
	if slow == 0 {
		slow = 1
	}
	corr := func(rot float64) float64 {
		return float64(dim) * math.Log(float64(orig)/(rot*2*math.Pi)) / (2 * math.Log(theta))
	}
	low, high := corr(fast), corr(slow)
	if !sc.NoTruncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low, high = math.Max(low, 0), math.Min(high, float64(dim-1))
	if low == high {
		high += 0.001
	}
	for i, f := range inv {
		ramp := math.Min(math.Max((float64(i)-low)/(high-low), 0), 1)
		extrap := 1 - ramp
		inv[i] = f/sc.Factor*(1-extrap) + f*extrap
	}
	return af, nil
}
