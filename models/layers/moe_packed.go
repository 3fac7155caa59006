package layers

import (
	"github.com/atom-go/atom/models/formats"
	"github.com/atom-go/atom/ops"
)

// packedExperts loads gpt-oss's experts, stored as one tensor per projection holding every
// expert (formats.PackedExperts): w13 de-interleaved into each expert's gate rows [lo, hi)
// then its up rows, w2's columns [lo, hi), and with cfg.ExpertBias their biases, the down
// projection's on the first rank only (the ranks' partial sums are reduced once).
func (c *Context) packedExperts(prefix string, cfg MoEConfig, lo, hi int) (w13, w2, b13, b2 ops.Tensor) {
	if c.err != nil {
		return nil, nil, nil, nil
	}
	gu := formats.ExpertWeight{Name: prefix + ".w13", Layout: formats.Stacked, Packed: &formats.PackedExperts{
		Tensor: prefix + ".gate_up_proj", Experts: cfg.Experts, Rows: 2 * cfg.Inter, Cols: cfg.Hidden, Interleaved: true,
		Lo: lo, Hi: hi}}
	dn := formats.ExpertWeight{Name: prefix + ".w2", Layout: formats.Cols, Packed: &formats.PackedExperts{
		Tensor: prefix + ".down_proj", Experts: cfg.Experts, Rows: cfg.Hidden, Cols: cfg.Inter, Lo: lo, Hi: hi}}
	var err error
	if w13, err = c.format.LoadExperts(c.load, gu); err != nil {
		c.fail(err)
		return nil, nil, nil, nil
	}
	if w2, err = c.format.LoadExperts(c.load, dn); err != nil {
		c.fail(err)
		return nil, nil, nil, nil
	}
	if !cfg.ExpertBias {
		return w13, w2, nil, nil
	}
	if b13, err = c.load.PackedBias(gu); err != nil {
		c.fail(err)
		return nil, nil, nil, nil
	}
	if c.shard.Rank == 0 {
		if b2, err = c.load.PackedBias(dn); err != nil {
			c.fail(err)
		}
	}
	return w13, w2, b13, b2
}
